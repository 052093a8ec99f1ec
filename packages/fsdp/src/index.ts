export type { ComputeDType, FsdpOptions, ResolvedOptions } from './api.js';
export { defaultPredivideFactor, resolveOptions } from './api.js';
export type { ShardingStrategy } from './sharding-strategy.js';
export { SHARDING_STRATEGIES } from './sharding-strategy.js';
export {
  FileWriteError,
  FsdpConfigError,
  FsdpError,
  FsdpStateError,
  FsdpStorageError,
  FsdpWrapError,
} from './errors.js';
export type { FlatParamEntry, ShardedState } from './flat-param.js';
export { FlatParameter } from './flat-param.js';
export { FSDP, FullyShardedDataParallel } from './fully-sharded.js';
export { cleanPath, WRAPPED_MODULE } from './module-tree.js';
export { clipShardedGradNorm, reducePartialNorm, ShardedGradScaler } from './grad-norm.js';
export type { TrainingState } from './param-group.js';
export type { SummonOptions } from './summon.js';
export type { AutoWrapPolicy } from './wrap.js';
export {
  autoWrap,
  enableWrap,
  moduleClassAutoWrapPolicy,
  replaceChild,
  sizeBasedAutoWrapPolicy,
  wrap,
} from './wrap.js';
export type { EntryLayout, FlatParamLayout, ShardedLayout } from './layout.js';
export { shardedLayout } from './layout.js';
export type { FullStateDictOptions, LocalStateDict } from './state-dict.js';
export {
  consolidateShardWeights,
  FsdpStateDictError,
  fullStateDict,
  loadFullStateDict,
  loadLocalStateDict,
  localStateDict,
} from './state-dict.js';
export type { FullOptimStateDict, GatherOptimOptions } from './optim-state.js';
export {
  gatherFullOptimStateDict,
  getShardFromOptimStateDict,
  loadFullOptimStateDict,
  loadLocalOptimStateDict,
  localOptimStateDict,
} from './optim-state.js';
export { OpfsStore } from './ssd/opfs-store.js';
export type { ShardStore, ShardStoreStats, SsdOffloadOptions } from './ssd/shard-store.js';
export type { OffloadedModel } from './ssd/ssd-offload.js';
export { ssdStats, stepOffloaded } from './ssd/ssd-offload.js';
export { SsdShards } from './ssd/ssd-shards.js';
export type { Gatherable } from './ssd/ssd-shards.js';
