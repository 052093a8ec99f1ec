export { backendFactories, webGpuTestsEnabled } from './backends.js';
export type { BackendFactory } from './backends.js';
export { describeBackends } from './describe-backends.js';
export type { BackendContext } from './describe-backends.js';
export { ClosenessError, expectClose, toleranceFor } from './tolerance.js';
export type { Tolerance } from './tolerance.js';
export {
  broadcastIndex,
  broadcastReference,
  matmulReference,
  roundValues,
  seededValues,
  stridesOf,
  unravel,
} from './reference.js';
export { catchDeferred } from './deferred.js';
export { FUZZ_SEED, fuzzParameters } from './fuzz.js';
