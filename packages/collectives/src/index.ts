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
 * `joinShm`, `createShmHandle` and `ShmTransport` stay here: they only need SharedArrayBuffer and
 * Atomics, so a cross-origin-isolated page can run shm ranks in its own Web Workers.
 */
export type { AbortReason, CollectiveErrorFields, Fingerprint } from './errors.js';
export {
  CollectiveError,
  CollectiveMismatchError,
  CollectiveTimeoutError,
  errorFromAbortReason,
  GroupAbortedError,
  PeerLostError,
  TransportAbortedError,
} from './errors.js';
export type { ReduceOp } from './kernels/reduce.js';
export { REDUCE_OPS } from './kernels/reduce.js';
export type { CollectiveData, CommDType, HostData } from './operand.js';
export type { StagingStats } from './operand-staging.js';
export type { GroupState, OpOptions, ProcessGroupOptions, ReduceOptions } from './process-group.js';
export { Work } from './group/work.js';
export { ProcessGroup } from './process-group.js';
export type { ShardRange } from './shard.js';
export { shardRange } from './shard.js';
export type { Transport } from './transport.js';
export { AbortState } from './transport.js';
export { Mailbox } from './transports/mailbox.js';
export {
  createLocalGroups,
  createLocalTransports,
  LocalHub,
  LocalTransport,
} from './transports/local/local-transport.js';
export { joinShm } from './transports/shm/join-shm.js';
export type { ShmHandle } from './transports/shm/shm-layout.js';
export { createShmHandle } from './transports/shm/shm-layout.js';
export { ShmTransport } from './transports/shm/shm-transport.js';
export type { BrowserRank, BrowserRankOptions, JoinUrl } from './browser-rank.js';
export { connectBrowserRank, formatJoinUrl, parseJoinUrl } from './browser-rank.js';
export type {
  NetworkBackend,
  NetworkTransportOptions,
} from './connect-transport.js';
export {
  connectNetworkTransport,
  createNetworkTransport,
} from './connect-transport.js';
export type { PreAuthLimits } from './pre-auth-guard.js';
export type { RendezvousOptions } from './rendezvous/env.js';
export { resolveRendezvousOptions } from './rendezvous/env.js';
export { RendezvousError } from './rendezvous/errors.js';
export { expandSlurmHostlist } from './rendezvous/slurm-hostlist.js';
export type { InitProcessGroupOptions } from './rendezvous/init-process-group.js';
export { initProcessGroup } from './rendezvous/init-process-group.js';
export type { Rendezvous } from './rendezvous/rendezvous.js';
export { rendezvous } from './rendezvous/rendezvous.js';
export type { StoreClientOptions, WebSocketConstructor } from './rendezvous/store-client.js';
export { StoreClient } from './rendezvous/store-client.js';
export type { WsTransportOptions } from './transports/ws/ws-transport.js';
export { WsTransport } from './transports/ws/ws-transport.js';
