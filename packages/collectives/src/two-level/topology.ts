import { ArgumentError } from '@webshard/tensor-core';

/** What a rank publishes at rendezvous about where it runs. */
export interface RankPlace {
  /** Names the shared-memory world the rank is in: ranks with the same `node` share one. */
  readonly node: string;
  /** The rank's index in that world (its `LOCAL_RANK`). */
  readonly localRank: number;
  /** The number of ranks in that world. */
  readonly localSize: number;
  /** The machine, for messages only. */
  readonly host: string;
}

/**
 * Which global ranks share a node, as the ranks told each other at rendezvous: nodes are numbered
 * by their lowest global rank, and a node's ranks by their local rank. Two-level collectives need
 * every node to hold the same number of ranks (`regular`); sub-groups and irregular worlds run
 * over the routed messages alone.
 */
export class NodeTopology {
  /** `nodes[n][l]`: the global rank of local rank `l` on node `n`. */
  readonly nodes: readonly (readonly number[])[];
  private readonly nodeOfRank: readonly number[];
  private readonly localOfRank: readonly number[];

  constructor(places: readonly RankPlace[]) {
    const byName = new Map<string, number[]>();
    places.forEach((place, rank) => {
      const ranks = byName.get(place.node) ?? [];
      if (ranks[place.localRank] !== undefined) {
        throw new ArgumentError(
          'initProcessGroup',
          `ranks ${ranks[place.localRank]} and ${rank} both say they are local rank ${place.localRank} of node '${place.host}'`,
        );
      }
      ranks[place.localRank] = rank;
      byName.set(place.node, ranks);
    });
    const nodes = [...byName.values()].sort((a, b) => Math.min(...a) - Math.min(...b));
    for (const ranks of nodes) {
      const first = places[ranks.find((r) => r !== undefined)!]!;
      const complete = ranks.length === first.localSize && ranks.every((r) => r !== undefined);
      if (!complete) {
        throw new ArgumentError(
          'initProcessGroup',
          `node '${first.host}' has ${first.localSize} local ranks, but ranks [${ranks.filter((r) => r !== undefined).join(', ')}] joined for it`,
        );
      }
    }
    const nodeOfRank: number[] = [];
    const localOfRank: number[] = [];
    for (const [node, ranks] of nodes.entries()) {
      for (const [local, rank] of ranks.entries()) {
        nodeOfRank[rank] = node;
        localOfRank[rank] = local;
      }
    }
    this.nodes = nodes;
    this.nodeOfRank = nodeOfRank;
    this.localOfRank = localOfRank;
  }

  /** The number of ranks in the world. */
  get size(): number {
    return this.nodeOfRank.length;
  }

  /** The node index of global rank `rank`. */
  nodeOf(rank: number): number {
    return this.nodeOfRank[rank]!;
  }

  /** The local rank of global rank `rank` on its node. */
  localRankOf(rank: number): number {
    return this.localOfRank[rank]!;
  }

  /** The global rank of local rank `local` on node `node`. */
  rankOf(node: number, local: number): number {
    return this.nodes[node]![local]!;
  }

  /** Ranks per node when every node holds the same number, else null. */
  get localSize(): number | null {
    const first = this.nodes[0]!.length;
    return this.nodes.every((ranks) => ranks.length === first) ? first : null;
  }
}
