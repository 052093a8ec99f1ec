import { ArgumentError } from '@webshard/tensor-core';
import { ProcessGroup, type ProcessGroupOptions } from './process-group.js';
import {
  checkThreadRankJoin,
  joinThreadRank,
  type ThreadRank,
  threadRankData,
} from './transports/shm/thread-rank.js';
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
   * A simulated link (latency, bandwidth, loss; [Note: the link shaper] in
   * two-level/link-shaper.ts): between the nodes for a thread rank of a job of several nodes,
   * between every pair of ranks for a `tcp` or `ws` rank (shaped on the communication worker with
   * `progress: 'worker'`, where the bytes move). Not for a thread rank of one node. Default
   * `WEBSHARD_LINK` (`latency=1ms,bandwidth=10gbit,loss=0.0001`, or a preset such as
   * `broadband-20`), else none. Every rank must give the same.
   */
  link?: LinkSettings | string;
  /**
   * Where this rank's communication makes progress. `'thread'` (default): on the rank's own
   * thread, while it awaits; a collective issued before a kernel that never yields moves only
   * after the kernel. `'worker'`: on a communication worker (a `worker_threads` Worker beside the
   * rank, Node only, `tcp` or `ws`, or the `shm` world of a thread rank of one node) that hosts the transport, moves the bytes and reduces while
   * the rank's thread computes ([Note: the communication worker handshake] in
   * comm-worker/handshake.ts); the group returned is a `WorkerGroup`, whose calls, handles and
   * errors are those of every `ProcessGroup`. Costs a hand-off per op (measured in the package
   * README): worth it when the rank computes while its ops are in flight. Ranks may differ in it.
   * Not for a thread rank of a job of several nodes (two-level) yet: an `ArgumentError` there.
   */
  progress?: ProgressMode;
}

/** Where a rank's communication makes progress: see `InitProcessGroupOptions.progress`. */
export type ProgressMode = 'thread' | 'worker';

/** A rank whose communication runs on its worker (loaded on demand: it needs Node). */
async function startWorkerGroup(
  transportOptions: Omit<NetworkTransportOptions, 'backend'>,
  backend: NetworkBackend | undefined,
  group: ProcessGroupOptions | undefined,
): Promise<ProcessGroup> {
  const { WebSocket, ...connect } = transportOptions;
  if (WebSocket !== undefined)
    throw new ArgumentError(
      'initProcessGroup',
      "progress 'worker': a WebSocket constructor cannot be handed to the worker",
    );
  const { WorkerGroup } = await import('./comm-worker/worker-group.js');
  return WorkerGroup.start({
    connect: { ...connect, backend: backend ?? 'tcp' },
    ...(group === undefined ? {} : { group }),
  });
}

/**
 * A thread rank of one node whose communication runs on its worker: the worker attaches the
 * rank's end of the node's rings ([Note: the communication worker handshake]); the launcher hears
 * `joined` once it has, and `closed` once it closed them ([Note: ranks as threads]).
 */
async function startThreadWorkerGroup(
  thread: ThreadRank,
  expected: { rank?: number; worldSize?: number; backend?: string },
  group: ProcessGroupOptions | undefined,
): Promise<ProcessGroup> {
  checkThreadRankJoin(thread, expected);
  const { WorkerGroup } = await import('./comm-worker/worker-group.js');
  const world = await WorkerGroup.start({
    shm: { handle: thread.handle, rank: thread.rank },
    onClosed: () => thread.tell('closed'),
    ...(group === undefined ? {} : { group }),
  });
  thread.tell('joined');
  return world;
}

function isNode(): boolean {
  return typeof process !== 'undefined' && typeof process.versions?.node === 'string';
}

function defaultBackend(): NetworkBackend {
  return isNode() ? 'tcp' : 'ws';
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
  const { group, backend, link, progress, ...rest } = options;
  const linkGiven =
    link ?? (isNode() && process.env.WEBSHARD_LINK ? process.env.WEBSHARD_LINK : undefined);
  const transportOptions = { ...rest, ...(linkGiven === undefined ? {} : { link: linkGiven }) };
  if (progress !== undefined && progress !== 'thread' && progress !== 'worker')
    throw new ArgumentError(
      'initProcessGroup',
      `progress must be 'thread' or 'worker', got ${JSON.stringify(progress)}`,
    );
  const thread = await threadRankData();
  if (thread?.node !== undefined && progress === 'worker')
    throw new ArgumentError(
      'initProcessGroup',
      "progress 'worker' runs tcp, ws and shm ranks; this rank is a thread of a node of a job of several (two-level), which progresses on its thread",
    );
  // A node of several: its shm world joins the others' over the network ([Note: two-level
  // collectives] in two-level/two-level-transport.ts).
  if (thread?.node !== undefined) return joinThreadNode(thread, options);
  if (thread !== null && progress === 'worker')
    return startThreadWorkerGroup(thread, options, group);
  if (thread !== null) return joinThreadRank(thread, options, group);
  if (progress === 'worker') return startWorkerGroup(transportOptions, backend, group);
  const transport = await connectNetworkTransport({
    ...transportOptions,
    backend: backend ?? defaultBackend(),
  });
  return ProcessGroup.fromTransport(transport, group);
}
