import type { Comm } from '../algorithms/comm.js';
import { ringAllGather } from '../algorithms/gather.js';
import { ringReduce } from '../algorithms/reduce.js';
import type { SharedStep } from '../algorithms/shared.js';
import {
  type CrossPhase,
  type TwoLevelStep,
  twoLevelAllGather,
  twoLevelAllReduce,
  twoLevelReduceScatter,
  type WideData,
} from '../algorithms/two-level.js';
import { ReduceArena, type ReduceOp } from '../kernels/reduce.js';
import { bytesOf, type CommDType, type HostData } from '../operand.js';
import { shardRange } from '../shard.js';
import type { SharedArena } from '../shared-arena.js';
import type { NodeTopology } from '../two-level/topology.js';
import { twoLevelOf } from '../two-level/two-level-transport.js';
import type { GroupView, OpContext } from './op-context.js';
import { type RingSettings, segmentBytes, streamedLayout } from './ring-layout.js';

/**
 * How the world group of a `TwoLevelTransport` runs all-reduce, all-gather and reduce-scatter:
 * in the node through its shm arena, between nodes over rings of the ranks of the same local index
 * ([Note: two-level collectives] in two-level/two-level-transport.ts). Null (`TwoLevelPlan.for`)
 * for any other group: sub-groups, irregular worlds (nodes of different sizes) and worlds of one
 * rank per node run over the routed messages as on any transport.
 */
export class TwoLevelPlan {
  private readonly arena = new ReduceArena();
  private readonly settings: RingSettings;
  private scratchBuffer = new ArrayBuffer(0);
  private readonly node: number;
  private readonly localRank: number;

  private constructor(
    group: GroupView,
    private readonly topology: NodeTopology,
    private readonly sharedArena: SharedArena,
    segment: number | 'auto',
  ) {
    this.node = topology.nodeOf(group.rank);
    this.localRank = topology.localRankOf(group.rank);
    this.settings = { segmentBytes: segment, size: topology.nodes.length };
  }

  /** The plan of `group` when it is a two-level transport's world group, else null. */
  static for(
    group: GroupView,
    world: boolean,
    options: { segmentBytes: number | 'auto'; sharedMemory: boolean },
  ): TwoLevelPlan | null {
    const transport = twoLevelOf(group.transport);
    if (transport === null || !world || !options.sharedMemory) return null;
    const { topology } = transport;
    const localSize = topology.localSize;
    if (localSize === null || localSize < 2 || topology.nodes.length < 2) return null;
    return new TwoLevelPlan(group, topology, transport.local.sharedArena, options.segmentBytes);
  }

  allReduce(ctx: OpContext, dtype: CommDType, host: HostData, op: ReduceOp): Promise<void> {
    return twoLevelAllReduce(this.step(ctx), dtype, host, op);
  }

  reduceScatter(
    ctx: OpContext,
    dtype: CommDType,
    input: HostData,
    output: HostData,
    op: ReduceOp,
  ): Promise<void> {
    return twoLevelReduceScatter(this.step(ctx), dtype, input, output, op);
  }

  /** `own` is this rank's shard, already at its place in `output`. */
  allGather(
    ctx: OpContext,
    own: Uint8Array,
    output: Uint8Array,
    count: number,
    element: number,
  ): Promise<void> {
    return twoLevelAllGather(this.step(ctx), own, output, count, element);
  }

  private step(ctx: OpContext): TwoLevelStep {
    const { topology, node, localRank, sharedArena } = this;
    const local: SharedStep = {
      rank: localRank,
      size: topology.nodes[node]!.length,
      arena: sharedArena,
      barrier: async () => {
        // The node-mates the barrier waits for join the op's other waits (fingerprints from
        // other nodes) for a deadline's message, instead of replacing them.
        const added = new Set<number>();
        try {
          await sharedArena.barrier((ranks) => {
            for (const r of ranks) {
              const rank = topology.rankOf(node, r);
              if (ctx.waiting.has(rank)) continue;
              ctx.waiting.set(rank, 1);
              added.add(rank);
            }
          });
        } finally {
          for (const rank of added) ctx.waiting.delete(rank);
        }
      },
    };
    const comm: Comm = {
      rank: node,
      size: topology.nodes.length,
      send: (peer, data) => ctx.send(topology.rankOf(peer, localRank), data),
      recv: (peer, dst) => ctx.recv(topology.rankOf(peer, localRank), dst),
    };
    return { local, cross: this.cross(comm), scratch: (kind, count) => this.scratch(kind, count) };
  }

  private cross(comm: Comm): CrossPhase {
    const { arena, settings } = this;
    const kindOf = (data: WideData) => (data instanceof Int32Array ? 'i32' : 'f32');
    return {
      comm,
      allReduce: async (data, op, scale) => {
        const bytes = bytesOf(data);
        await ringReduce(
          comm,
          streamedLayout(arena, settings, op, kindOf(data), data.length),
          (c) => {
            const range = shardRange(data.length, comm.size, c);
            return [range.start, range.count];
          },
          { input: bytes, result: bytes, resultBase: 0, gather: bytes, scale },
        );
      },
      reduceScatter: async (input, piece, output, op, scale) => {
        await ringReduce(
          comm,
          streamedLayout(arena, settings, op, kindOf(input), input.length),
          piece,
          {
            input: bytesOf(input),
            result: bytesOf(output),
            resultBase: piece(comm.rank)[0],
            gather: null,
            scale,
          },
        );
      },
      allGather: async (buffer, own, piece) => {
        let longest = 0;
        for (let c = 0; c < comm.size; c++) longest = Math.max(longest, piece(c)[1]);
        await ringAllGather(comm, buffer, own, piece, segmentBytes(settings, 1, longest));
      },
    };
  }

  /** Scratch of `count` 4-byte elements, grown as needed and kept (ops of a group run one by one). */
  private scratch(kind: 'f32' | 'i32', count: number): WideData {
    if (this.scratchBuffer.byteLength < count * 4) this.scratchBuffer = new ArrayBuffer(count * 4);
    return kind === 'i32'
      ? new Int32Array(this.scratchBuffer, 0, count)
      : new Float32Array(this.scratchBuffer, 0, count);
  }
}
