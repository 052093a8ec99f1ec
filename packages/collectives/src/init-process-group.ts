import { ProcessGroup, type ProcessGroupOptions } from './process-group.js';
import { joinThreadRank, threadRankData } from './transports/shm/thread-rank.js';
import { joinThreadNode } from './two-level/join-node.js';
import type { LinkSettings } from './two-level/link-shaper.js';
import {
  connectNetworkTransport,
  type NetworkBackend,
  type NetworkTransportOptions,
} from './connect-transport.js';

/** Options of `initProcessGroup`: the network transport, its rendezvous, and the group's settings. */
export interface InitProcessGroupOptions extends Omit<NetworkTransportOptions, 'backend'> {
  /** The network transport: `tcp` (default in Node) or `ws` (default, and the only one, in browsers). */
  backend?: NetworkBackend;
  /** Settings of the world group (deadlines, segment sizes). */
  group?: ProcessGroupOptions;
  /**
   * A thread rank of a job of several nodes only: a simulated link between the nodes (latency,
   * bandwidth, loss; [Note: the link shaper] in two-level/link-shaper.ts). Default `WEBSHARD_LINK`
   * (`latency=1ms,bandwidth=10gbit,loss=0.0001`), else none. Every rank must give the same.
   */
  link?: LinkSettings | string;
}

function defaultBackend(): NetworkBackend {
  const isNode = typeof process !== 'undefined' && typeof process.versions?.node === 'string';
  return isNode ? 'tcp' : 'ws';
}

/**
 * torch.distributed's `init_process_group` for webshard: in a rank that `webshard-run` started as
 * a worker thread of a job of several nodes, joins its node's shared-memory world and the network
 * between nodes as one two-level world ([Note: two-level collectives]); of one node, joins that
 * node's shared-memory world ([Note: ranks as threads] in
 * transports/shm/thread-rank.ts; the rendezvous options are not used there, a `backend` given is
 * not either and the node's rank 0 warns once that it runs over shm instead (Node warning
 * `WEBSHARD_BACKEND_NOT_USED`), and a `rank` or `worldSize` that differs from the launcher's is an
 * `ArgumentError`). Anywhere else,
 * joins the rendezvous (rank 0 hosts the store; options not given come from `RANK`, `WORLD_SIZE`,
 * `MASTER_ADDR`, `MASTER_PORT`, `LOCAL_RANK` and `WEBSHARD_TOKEN`, as `webshard-run` sets them, or
 * from Slurm's and Kubernetes' variables, see `resolveRendezvousOptions`), connects the `tcp` or
 * `ws` transport to every rank and returns the world group. Closing the group closes the
 * transport and leaves the rendezvous.
 */
export async function initProcessGroup(
  options: InitProcessGroupOptions = {},
): Promise<ProcessGroup> {
  const { group, backend, link: _link, ...transportOptions } = options;
  const thread = await threadRankData();
  // A node of several: its shm world joins the others' over the network ([Note: two-level
  // collectives] in two-level/two-level-transport.ts).
  if (thread?.node !== undefined) return joinThreadNode(thread, options);
  if (thread !== null) return joinThreadRank(thread, options, group);
  const transport = await connectNetworkTransport({
    ...transportOptions,
    backend: backend ?? defaultBackend(),
  });
  return ProcessGroup.fromTransport(transport, group);
}
