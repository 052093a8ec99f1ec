import type { ProcessGroup } from '@webshard/collectives';
import { FsdpConfigError } from './errors.js';

/**
 * How a unit shards, with PyTorch FSDP's names:
 * - `FULL_SHARD`: parameters, gradients and optimizer state sharded over the whole group; the full
 *   parameters are freed after forward and gathered again in backward (ZeRO-3).
 * - `SHARD_GRAD_OP`: the same, but the full parameters stay gathered from forward to the end of
 *   backward (`reshardAfterForward: false`, ZeRO-2): one all-gather a step instead of two.
 * - `HYBRID_SHARD`: `FULL_SHARD` inside each node, replicated across nodes ([Note: hybrid sharding]).
 * - `NO_SHARD`: every rank holds everything and gradients are all-reduced, as DDP does (hybrid
 *   sharding with one rank a node).
 */
export type ShardingStrategy = 'FULL_SHARD' | 'SHARD_GRAD_OP' | 'HYBRID_SHARD' | 'NO_SHARD';

/** Every `ShardingStrategy`, in PyTorch's order. */
export const SHARDING_STRATEGIES: readonly ShardingStrategy[] = [
  'FULL_SHARD',
  'SHARD_GRAD_OP',
  'HYBRID_SHARD',
  'NO_SHARD',
];

/** The groups a unit communicates over, as its strategy decides. */
export interface StrategyGroups {
  /** Parameters are sharded over this group: all-gathers and reduce-scatters. */
  readonly shard: ProcessGroup;
  /**
   * The ranks holding the same shard on the other nodes: each reduced gradient shard is
   * all-reduced over it. Null when nothing is replicated.
   */
  readonly replicate: ProcessGroup | null;
  /** Whether the full parameters are freed after forward. */
  readonly reshardAfterForward: boolean;
}

/**
 * [Note: hybrid sharding]
 * `HYBRID_SHARD` (PyTorch's; DeepSpeed's ZeRO++ hpZ is its cousin) shards each unit over the
 * ranks of one node and replicates the shards across nodes: with N nodes of L ranks, world rank
 * r = n * L + l (node-major, as `webshard-run --nnodes` numbers ranks) is shard rank l of node n's
 * shard group {n * L .. n * L + L - 1}, and replica n of the replicate group {l, L + l, ...}.
 * Gathers (forward and backward) never leave the node: on a two-level transport the sub-group's
 * messages to node-mates go through the node's shared memory. A gradient is reduce-scattered in
 * the node, then the L-th of it each rank holds is all-reduced with the same shard of every other
 * node, so the network carries one all-reduce of the gradient (2P(N-1)/N bytes a node for P
 * bytes of gradient, spread over L connections) instead of FULL_SHARD's gathers and
 * reduce-scatter across the whole world (3P). Memory is FULL_SHARD's at world size L. Divide
 * factors count the whole world (pre * post = N * L), so the result is the world's mean gradient.
 * Every rank builds its two sub-groups with `newGroup` in the same order, once per (group, node
 * size), and every unit of a tree shares them: sub-groups of one parent run independently. On one
 * node (node size = group size) the group itself is the shard group, as FULL_SHARD: it keeps the
 * world group's shared arena and registered buffers, which sub-groups do not have (they run on
 * the transport's messages, so a hybrid step stages its operands).
 * `NO_SHARD` is the same with L = 1: the shard is the whole flat parameter, no gather goes
 * ([Note: one rank]) and the gradient is all-reduced over the world. State dicts and sharded
 * checkpoints see only the shard group: a checkpoint holds one replica (node 0's ranks write it),
 * and loads at any node count or strategy, since loading cuts the saved flat parameters for the
 * loading shard group.
 */
const cache = new WeakMap<
  ProcessGroup,
  Map<number, { shard: ProcessGroup; replicate: ProcessGroup }>
>();

/** The node size of the launcher's environment (`LOCAL_WORLD_SIZE`), or undefined. */
function launcherNodeSize(): number | undefined {
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process
    ?.env;
  const value = env?.LOCAL_WORLD_SIZE;
  return value === undefined || value === '' ? undefined : Number(value);
}

/**
 * This rank's shard group and replicate group for `nodeSize` ranks a node, made once per
 * (`group`, `nodeSize`) with `newGroup`: every rank of `group` must ask in the same order.
 */
export function hybridGroups(
  group: ProcessGroup,
  nodeSize: number,
): { shard: ProcessGroup; replicate: ProcessGroup } {
  let byNodeSize = cache.get(group);
  if (byNodeSize === undefined) {
    byNodeSize = new Map();
    cache.set(group, byNodeSize);
  }
  const known = byNodeSize.get(nodeSize);
  if (known !== undefined) return known;
  const nodes = group.size / nodeSize;
  let shard: ProcessGroup | null = null;
  let replicate: ProcessGroup | null = null;
  for (let n = 0; n < nodes; n++) {
    const ranks = Array.from({ length: nodeSize }, (_, l) => n * nodeSize + l);
    shard = group.newGroup(ranks) ?? shard;
  }
  for (let l = 0; l < nodeSize; l++) {
    const ranks = Array.from({ length: nodes }, (_, n) => n * nodeSize + l);
    replicate = group.newGroup(ranks) ?? replicate;
  }
  const made = { shard: shard!, replicate: replicate! };
  byNodeSize.set(nodeSize, made);
  return made;
}

/**
 * Check `shardingStrategy` against the options it decides and pick the groups: a strategy that
 * contradicts `reshardAfterForward` or `processGroupReduceScatter`, a `nodeSize` without
 * `HYBRID_SHARD`, or a node size that does not divide the group is a `FsdpConfigError`.
 */
export function resolveStrategy(
  op: string,
  group: ProcessGroup,
  options: {
    shardingStrategy?: ShardingStrategy;
    nodeSize?: number;
    reshardAfterForward?: boolean;
    processGroupReduceScatter?: ProcessGroup;
  },
): StrategyGroups {
  const strategy = options.shardingStrategy;
  const where = `(rank ${group.rank} of ${group.size})`;
  if (strategy !== undefined && !SHARDING_STRATEGIES.includes(strategy)) {
    throw new FsdpConfigError(
      op,
      `shardingStrategy must be one of ${SHARDING_STRATEGIES.join(', ')}, got '${String(strategy)}' ${where}`,
    );
  }
  const reshard = options.reshardAfterForward;
  const conflict = (detail: string): never => {
    throw new FsdpConfigError(op, `shardingStrategy '${strategy}' ${detail} ${where}`);
  };
  if (strategy === 'FULL_SHARD' && reshard === false) {
    conflict('reshards after forward: reshardAfterForward false is SHARD_GRAD_OP');
  }
  if (strategy === 'SHARD_GRAD_OP' && reshard === true) {
    conflict('keeps the full parameters after forward: reshardAfterForward true is FULL_SHARD');
  }
  if (strategy === 'NO_SHARD' && reshard !== undefined) {
    conflict('never frees the parameters: reshardAfterForward does not apply');
  }
  if (options.nodeSize !== undefined && strategy !== 'HYBRID_SHARD') {
    throw new FsdpConfigError(
      op,
      `nodeSize (${options.nodeSize}) needs shardingStrategy 'HYBRID_SHARD', got '${strategy ?? 'FULL_SHARD'}' ${where}`,
    );
  }
  if (strategy !== 'HYBRID_SHARD' && strategy !== 'NO_SHARD') {
    return {
      shard: group,
      replicate: null,
      reshardAfterForward: reshard ?? strategy !== 'SHARD_GRAD_OP',
    };
  }
  if (options.processGroupReduceScatter !== undefined) {
    conflict('reduce-scatters on its own sub-groups: processGroupReduceScatter does not apply');
  }
  let nodeSize = 1;
  if (strategy === 'HYBRID_SHARD') {
    const found = options.nodeSize ?? launcherNodeSize();
    if (found === undefined) {
      conflict(
        'needs the ranks per node: pass nodeSize, or start the ranks with webshard-run (LOCAL_WORLD_SIZE)',
      );
    }
    nodeSize = found!;
    if (!Number.isInteger(nodeSize) || nodeSize < 1 || group.size % nodeSize !== 0) {
      conflict(`needs a node size that divides the group's ${group.size} ranks, got ${nodeSize}`);
    }
  }
  const reshardAfterForward = strategy === 'NO_SHARD' ? true : (reshard ?? true);
  // One node: the group itself, which keeps its shared arena and registered memory.
  if (nodeSize === group.size) return { shard: group, replicate: null, reshardAfterForward };
  const { shard, replicate } = hybridGroups(group, nodeSize);
  return {
    shard,
    replicate: replicate.size > 1 ? replicate : null,
    reshardAfterForward,
  };
}
