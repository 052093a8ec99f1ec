// The `@webshard/collectives/transports` entry: the layer under `ProcessGroup`, for code that
// builds its own world (a transport of its own, a shm world in Web Workers, a store client) rather
// than calling `initProcessGroup`. Loads in browsers, like the root. See
// [Note: the collectives surface] in index.ts.
export { connectNetworkTransport, createNetworkTransport } from '../connect-transport.js';
export { errorFromAbortReason } from '../errors.js';
export type { OpStamp } from '../op-stamp.js';
export { NO_STAMP, stampMismatch } from '../op-stamp.js';
export { resolveRendezvousOptions } from '../rendezvous/env.js';
export type { Rendezvous } from '../rendezvous/rendezvous.js';
export { rendezvous } from '../rendezvous/rendezvous.js';
export { expandSlurmHostlist } from '../rendezvous/slurm-hostlist.js';
export type { StoreClientOptions } from '../rendezvous/store-client.js';
export { StoreClient } from '../rendezvous/store-client.js';
export type { Transport } from '../transport-contract.js';
export { AbortState } from '../transport-contract.js';
export {
  createLocalTransports,
  LocalHub,
  LocalTransport,
} from '../transports/local/local-transport.js';
export { Mailbox } from '../transports/mailbox.js';
export { joinShm } from '../transports/shm/join-shm.js';
export type { ShmHandle } from '../transports/shm/shm-layout.js';
export { createShmHandle } from '../transports/shm/shm-layout.js';
export { ShmTransport } from '../transports/shm/shm-transport.js';
export type { WsTransportOptions } from '../transports/ws/ws-transport.js';
export { WsTransport } from '../transports/ws/ws-transport.js';
