/**
 * [Note: the public surface]
 * The root entry holds what a program that trains a model uses: tensors and their ops, `nn`,
 * optimizers, mixed precision, the user-level autograd controls (`backward`, `noGrad`,
 * `checkpoint`, `tidy`), random generators, backends as a user creates them, dtypes and the
 * error classes. What a library author or a backend implementer needs lives under named subpaths,
 * so that the root stays short and a change to either shows in its own API report
 * (`api/*.api.md`, checked by `pnpm check:api`):
 * - `@webshard/tensor-core/autograd`: the graph (`GradNode`, edges, hooks, `queueCallback`,
 *   `recordOp`, `gradients`, `gradcheck`, parameter marks) for wrappers such as FSDP and DDP;
 * - `@webshard/tensor-core/backend`: the kernel contract (`KernelTensor`, `RawStorage`, op
 *   kinds), the backend classes, the caching allocator, `TensorStorage`, dtype bit conversions,
 *   Philox, and the fused in-place steps (`adamStep`, `sgdStep`, `axpy_`, `checkFinite`);
 * - `@webshard/tensor-core/io`: safetensors bytes (`encodeSafetensors`, `decodeSafetensors`);
 * - `@webshard/tensor-core/node`: safetensors files (Node only);
 * - `@webshard/tensor-core/testing`: `describeBackends` and the reference helpers.
 * No name is exported from two entries.
 */
export { GradScaler } from './amp/grad-scaler.js';
export type {
  GradScalerOptions,
  GradScalerStateDict,
  ScalableOptimizer,
} from './amp/grad-scaler.js';
export { autocast, clearAutocastCache, isAutocastEnabled } from './amp/autocast.js';
export type { AutocastOptions } from './amp/autocast.js';
export { MixedPrecision } from './amp/mixed-precision.js';
export type { MixedPrecisionOptions } from './amp/mixed-precision.js';
export { CapturedStep } from './capture/captured-step.js';
export type {
  CapturedStepOptions,
  CapturedStepStats,
  CapturedStepStatus,
} from './capture/captured-step.js';
export { hostStep, isCapturing } from './capture/host-step.js';
export { checkpoint } from './autograd/checkpoint.js';
export type { CheckpointOptions } from './autograd/checkpoint.js';
export { backward } from './autograd/engine.js';
export type { BackwardOptions } from './autograd/engine.js';
export { AutogradError } from './autograd/errors.js';
export { enableGrad, isGradEnabled, noGrad, setGradEnabled } from './autograd/grad-mode.js';
export type { RemovableHandle } from './autograd/hooks.js';
export type { TensorHook } from './autograd/node.js';
export type { BackwardCallback, RunningBackward } from './autograd/running-backward.js';
export type { Backend, BackendKind, RecordedWork, WorkRecorder } from './backend/backend.js';
export { createBackend } from './backend/create.js';
export type { CreateBackendOptions } from './backend/create.js';
export type { CpuBackendOptions } from './backend/cpu/cpu-backend-options.js';
export { type FmaSupport, relaxedFmaSupport } from './backend/cpu/fma-support.js';
export { webGpuLikelyAvailable } from './backend/webgpu/gpu-runtime.js';
export { createWebGpuBackend } from './backend/webgpu/webgpu-backend.js';
export type { WebGpuBackendOptions } from './backend/webgpu/webgpu-backend.js';
export type { AutocastDeviceType, AutocastDType } from './autocast-state.js';
export { bytesPerElement, DTYPES, isFloatDType } from './dtype.js';
export type { DType, HostArray } from './dtype.js';
export {
  ArgumentError,
  BackendError,
  DTypeError,
  FreedTensorError,
  IndexError,
  NoAdapterError,
  NodeRequiredError,
  OutOfMemoryError,
  ShapeError,
  SharedStorageError,
  StateError,
  WebshardError,
} from './errors.js';
export { CausalSelfAttention } from './nn/attention.js';
export type { CausalSelfAttentionOptions } from './nn/attention.js';
export { ModuleDict, ModuleList, Sequential } from './nn/containers.js';
export { GPT, GPTBlock, gptLoss } from './nn/gpt.js';
export type { GPTConfig, GPTOptions, GPTOutput } from './nn/gpt.js';
export {
  constantInit,
  kaimingUniformBound,
  normalInit,
  uniformInit,
} from './nn/init.js';
export type { LayerOptions } from './nn/init.js';
export {
  CrossEntropyLoss,
  Dropout,
  Embedding,
  GELU,
  LayerNorm,
  Linear,
  MSELoss,
  ReLU,
} from './nn/layers.js';
export type { ForwardHook, ForwardPreHook } from './nn/module.js';
export { Module } from './nn/module.js';
export type {
  DTypeMismatch,
  FreedKey,
  ShapeMismatch,
  StateDictInput,
  StateDictProblems,
} from './nn/state-dict.js';
export { StateDictError } from './nn/state-dict.js';
export {
  abs,
  add,
  arange,
  argmax,
  batchedMatmul,
  broadcastTo,
  cast,
  chunk,
  clone,
  concat,
  copy_,
  crossEntropy,
  div,
  embedding,
  empty,
  eq,
  exp,
  expand,
  fill_,
  flatten,
  full,
  fullLike,
  ge,
  gelu,
  gt,
  indexAdd,
  layerNorm,
  le,
  linear,
  log,
  logSoftmax,
  lt,
  maskedFill,
  matmul,
  max,
  maximum,
  mean,
  min,
  minimum,
  mseLoss,
  mul,
  narrow,
  ne,
  neg,
  ones,
  onesLike,
  permute,
  pow,
  rand,
  randn,
  reciprocal,
  relu,
  reshape,
  rsqrt,
  scatterAdd,
  sigmoid,
  slice,
  softmax,
  split,
  sqrt,
  square,
  squeeze,
  sub,
  sum,
  tanh,
  tensor,
  toDType,
  transpose,
  unsqueeze,
  view,
  where,
  zeros,
  zerosLike,
} from './ops/index.js';
export type {
  Axes,
  CreateOptions,
  CrossEntropyOptions,
  LayerNormOptions,
  MatmulOptions,
  NestedNumbers,
  Operand,
  RandomOptions,
  ReduceOptions,
  SliceRange,
} from './ops/index.js';
export { scaledMaskedSoftmax } from './ops/masked-softmax.js';
export { Adam, AdamW } from './optim/adam.js';
export type { AdamHyperparameters, AdamState } from './optim/adam.js';
export { clipGradNorm, partialNorm } from './optim/clip-grad-norm.js';
export type { ClipGradNormOptions } from './optim/clip-grad-norm.js';
export { Optimizer, zeroGrads } from './optim/optimizer.js';
export type {
  OptimizerParamState,
  OptimizerStateDict,
  ParamGroup,
  ParamGroupInput,
  StepOptions,
} from './optim/optimizer.js';
export { SGD } from './optim/sgd.js';
export type { SgdHyperparameters, SgdState } from './optim/sgd.js';
export { getDefaultGenerator, manualSeed, RandomGenerator } from './random/generator.js';
export { mulberry32 } from './random/mulberry32.js';
export { createCpuBackend, getDefaultBackend, setDefaultBackend } from './runtime.js';
export { keep, tidy, tidyAsync } from './scope.js';
export { Tensor } from './tensor.js';
