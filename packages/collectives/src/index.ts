/**
 * [Note: the node entry]
 * This entry loads in browsers: nothing it reaches through static imports imports a `node:` module
 * or `ws` (index.test.ts follows the graph). What only runs in Node lives behind
 * `@webshard/collectives/node` (the shm launcher: `launchThreads` starts `node:worker_threads`
 * workers, `runShmWorker` reads `workerData`), or behind dynamic `import()` where one API serves
 * both (`initProcessGroup` and `connectNetworkTransport` load the tcp transport, the rendezvous
 * store server and the `ws` package only when asked to; the launcher is the `webshard-run` bin).
 * A subpath rather than dynamic imports for the launcher: its API is synchronous-looking setup
 * code a browser never calls, and a separate entry makes that visible in the import itself.
 * `joinShm`, `createShmHandle` and `ShmTransport` (in `@webshard/collectives/transports`) only
 * need SharedArrayBuffer and Atomics, so a cross-origin-isolated page can run shm ranks in its own
 * Web Workers.
 *
 * [Note: the collectives surface]
 * The root holds what a training script uses: `initProcessGroup` and its options, `ProcessGroup`
 * (and `WorkerGroup`, what `progress: 'worker'` gives) and `Work`, `createLocalGroups` for one-process worlds, `shardRange`, `averageScalar` and
 * `gatherScalar` for numbers on the host, the reduce ops and the
 * error classes. The layer below the group (the `Transport` contract and its implementations,
 * the rendezvous store client, the functions that build a transport from rendezvous options) is
 * `@webshard/collectives/transports`, for code that brings its own transport or world; each entry
 * has its API report in `api/` (`pnpm check:api`). No name is exported from two entries.
 */
export type { NetworkBackend, NetworkTransportOptions } from './connect-transport.js';
export type {
  ElasticGroup,
  JoinElasticOptions,
  Membership,
  MembershipChange,
} from './elastic/elastic-group.js';
export { joinElastic } from './elastic/elastic-group.js';
export type { JoinTls } from './elastic/join-tls.js';
export { ElasticError, ElasticWorldTooSmallError } from './elastic/errors.js';
export type { WorldBounds } from './elastic/membership.js';
export type { EpochAnnouncement } from './elastic/protocol.js';
export type { ElasticShare } from './elastic/partition.js';
export { elasticShare } from './elastic/partition.js';
export type { StateEntries, StateValue } from './elastic/state-transfer.js';
export { broadcastState, broadcastStateWhereDifferent } from './elastic/state-transfer.js';
export type {
  SliceReceiveOptions,
  SliceSendOptions,
  SliceTransferOptions,
} from './elastic/sliced-transfer.js';
export {
  receiveStateSlices,
  sendStateSlices,
  StateTransferError,
} from './elastic/sliced-transfer.js';
export type { AbortReason, CollectiveErrorFields, Fingerprint } from './errors.js';
export {
  CollectiveError,
  CollectiveMismatchError,
  CollectiveTimeoutError,
  GroupAbortedError,
  PeerLostError,
  RegisteredMemoryError,
  TransportAbortedError,
} from './errors.js';
export { Work } from './group/work.js';
export type { ReduceOp } from './kernels/reduce.js';
export { REDUCE_OPS } from './kernels/reduce.js';
export type { CollectiveData, CommDType, HostData } from './operand.js';
export type { StagingStats } from './operand-staging.js';
export type { BrowserRank, BrowserRankOptions, JoinUrl } from './browser-rank.js';
export { connectBrowserRank, formatJoinUrl, parseJoinUrl } from './browser-rank.js';
export type { PreAuthLimits } from './pre-auth-limits.js';
export type { GroupState, OpOptions, ProcessGroupOptions, ReduceOptions } from './process-group.js';
export { ProcessGroup } from './process-group.js';
export { WorkerGroup } from './comm-worker/worker-group.js';
export type { RendezvousOptions } from './rendezvous/env.js';
export type { StoreLimits } from './rendezvous/store-limits.js';
export { RendezvousError } from './rendezvous/errors.js';
export type { InitProcessGroupOptions, ProgressMode } from './init-process-group.js';
export { initProcessGroup } from './init-process-group.js';
export type { WebSocketConstructor } from './rendezvous/store-client.js';
export { averageScalar, gatherScalar, gatherScalars } from './scalar.js';
export type { ShardRange } from './shard.js';
export { shardRange } from './shard.js';
export { createLocalGroups } from './transports/local/local-transport.js';
