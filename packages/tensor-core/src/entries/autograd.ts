// The `@webshard/tensor-core/autograd` entry: the autograd graph for the authors of wrappers
// (FSDP, DDP, offload) and of new ops. A training script needs only the root's `backward`,
// `noGrad` and `checkpoint`. See [Note: the public surface] in index.ts.
export { asyncContextSupported } from '../async-context.js';
export { checkpointWith } from '../autograd/checkpoint.js';
export type { CheckpointResult } from '../autograd/checkpoint.js';
export {
  gradientEdge,
  registerPostAccumulateGradHook,
  registerTensorHook,
} from '../autograd/engine.js';
export { isBackwardRunning, queueCallback } from '../autograd/running-backward.js';
export { gradcheck } from '../autograd/gradcheck.js';
export type { GradcheckOptions, GradcheckResult } from '../autograd/gradcheck.js';
export { gradients } from '../autograd/gradients.js';
export { reduceTo } from '../autograd/layout-gradients.js';
export { AccumulateGrad, GradNode, isParameter, markParameter } from '../autograd/node.js';
export type {
  Edge,
  GradContext,
  GradientDef,
  PostAccumulateGradHook,
} from '../autograd/node.js';
export { recordOp } from '../autograd/record.js';
export type { OpRecord } from '../autograd/record.js';
export { activationGrad } from '../ops/index.js';
export { holdParameter, markManagedParameter } from '../optim/optimizer.js';
export type { ParamHolder } from '../optim/optimizer.js';
export type { GradNodeLike } from '../tensor.js';
