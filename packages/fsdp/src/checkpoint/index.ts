export { FileWriteError } from '../errors.js';
export type { AtomicWriteOptions, FaultHook, WriteStage } from './atomic-write.js';
export { SimulatedCrash, syncDirectory, writeFileAtomic } from './atomic-write.js';
export { consolidateCheckpoint } from './consolidate.js';
export type { Manifest, ManifestFile, SaveCheckpointOptions } from './sharded-checkpoint.js';
export {
  CheckpointError,
  loadShardedCheckpoint,
  MANIFEST,
  readCheckpoint,
  saveShardedCheckpoint,
} from './sharded-checkpoint.js';
// Node's file system, like the rest of this entry: the shard store of `ssdOffload` in Node.
export { NodeFileStore } from '../ssd/node-file-store.js';
export type { ShardStore, ShardStoreStats } from '../ssd/shard-store.js';
