export { resolveOptions } from './api.js';
export type { Layer, OffloadOptions, ResolvedOffloadOptions } from './api.js';
export { stepSlicesOnDevice } from './device-step.js';
export type { SteppableOptimizer } from './device-step.js';
export {
  MicrobatchError,
  OffloadConfigError,
  OffloadError,
  SliceTooLargeError,
} from './errors.js';
export { HostStore } from './host-store.js';
export { OffloadModel } from './offload-model.js';
export { balancedCut, layerDeviceBytes, planSlices } from './slice-plan.js';
export type { Slice, SlicePlan } from './slice-plan.js';
export { TransferQueue } from './transfer.js';
export type { TransferStats } from './transfer.js';
