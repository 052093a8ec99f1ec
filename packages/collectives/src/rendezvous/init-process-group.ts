import { ProcessGroup, type ProcessGroupOptions } from '../process-group.js';
import { joinThreadRank, threadRankData } from '../transports/shm/thread-rank.js';
import {
  connectNetworkTransport,
  type NetworkBackend,
  type NetworkTransportOptions,
} from '../connect-transport.js';

/** Options of `initProcessGroup`: the network transport, its rendezvous, and the group's settings. */
export interface InitProcessGroupOptions extends Omit<NetworkTransportOptions, 'backend'> {
  /** The network transport: `tcp` (default in Node) or `ws` (default, and the only one, in browsers). */
  backend?: NetworkBackend;
  /** Settings of the world group (deadlines, segment sizes). */
  group?: ProcessGroupOptions;
}

function defaultBackend(): NetworkBackend {
  const isNode = typeof process !== 'undefined' && typeof process.versions?.node === 'string';
  return isNode ? 'tcp' : 'ws';
}

/**
 * torch.distributed's `init_process_group` for webshard: in a rank that `webshard-run` started as
 * a worker thread, joins that node's shared-memory world ([Note: ranks as threads] in
 * transports/shm/thread-rank.ts; `backend` and the rendezvous options are not used there, and a
 * `rank` or `worldSize` that differs from the launcher's is an `ArgumentError`). Anywhere else,
 * joins the rendezvous (rank 0 hosts the store; options not given come from `RANK`, `WORLD_SIZE`,
 * `MASTER_ADDR`, `MASTER_PORT`, `LOCAL_RANK` and `WEBSHARD_TOKEN`, as `webshard-run` sets them, or
 * from Slurm's and Kubernetes' variables, see `resolveRendezvousOptions`), connects the `tcp` or
 * `ws` transport to every rank and returns the world group. Closing the group closes the
 * transport and leaves the rendezvous.
 */
export async function initProcessGroup(
  options: InitProcessGroupOptions = {},
): Promise<ProcessGroup> {
  const { group, backend, ...transportOptions } = options;
  const thread = await threadRankData();
  if (thread !== null) return joinThreadRank(thread, options, group);
  const transport = await connectNetworkTransport({
    ...transportOptions,
    backend: backend ?? defaultBackend(),
  });
  return ProcessGroup.fromTransport(transport, group);
}
