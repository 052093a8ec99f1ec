export type { DistributedDataParallelOptions } from './api.js';
export type { AllreduceMode, AutoTimings } from './auto-mode.js';
export { DEFAULT_MESSAGE_SIZE } from './api.js';
export type { PlannedBucket, PlanParam } from './bucket-plan.js';
export { planBuckets } from './bucket-plan.js';
export type { DdpState } from './distributed-data-parallel.js';
export { DistributedDataParallel } from './distributed-data-parallel.js';
export type { DdpErrorFields } from './errors.js';
export {
  DdpArgumentError,
  DdpError,
  DdpGroupAbortedError,
  DdpParameterMismatchError,
  DdpStateError,
  DdpUnusedParameterError,
} from './errors.js';
