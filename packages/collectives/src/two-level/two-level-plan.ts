import type { Comm } from '../algorithms/comm.js';
import { ringReduce } from '../algorithms/reduce.js';
import type { SharedStep } from '../algorithms/shared.js';
import type { ReduceMemory } from '../algorithms/reduce.js';
import {
  type CrossPhase,
  nodeAllGather,
  type TwoLevelStep,
  twoLevelAllReduce,
  twoLevelReduceScatter,
  type WideData,
} from './slot-schedule.js';
import {
  type StagedStep,
  stagedAllGather,
  stagedAllReduce,
  stagedReduceScatter,
} from './staged-schedule.js';
import { ReduceArena, type ReduceOp } from '../kernels/reduce.js';
import { bytesOf, type CommDType, type HostData, overlaps } from '../operand.js';
import { shardRange } from '../shard.js';
import type { SharedArena } from '../shared-arena.js';
import type { NodeTopology } from './topology.js';
import { twoLevelOf } from './two-level-transport.js';
import type { GroupView, OpContext } from '../group/op-context.js';
import {
  type RingSettings,
  ringLayout,
  ringStagingBytes,
  segmentBytes,
  streamedLayout,
} from '../group/ring-layout.js';

/**
 * The most bytes one op stages per rank ([Note: two-level node phases on staged memory]); a
 * larger op runs the slot schedule. Each rank keeps two such buffers, and the node's L ranks
 * share the arena's 2 GiB.
 */
const STAGING_LIMIT_BYTES = 256 << 20;

/**
 * `WEBSHARD_TWO_LEVEL_ROUNDS=1`: the slot schedule only, to compare the two (read at each op, so
 * a benchmark can interleave them; every rank of a node must see the same value).
 */
function roundsOnly(): boolean {
  const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process
    ?.env;
  return env?.WEBSHARD_TWO_LEVEL_ROUNDS === '1';
}

/** A staging buffer of this rank in the node's arena. */
interface Staging {
  offset: number;
  bytes: number;
}

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
  /** The two staging buffers ops alternate between, and which one the next op takes. */
  private readonly stagings: (Staging | null)[] = [null, null];
  private nextStaging = 0;
  /** The ring's receive slots in the arena (allocated with the first staged op). */
  private ringSlots = -1;

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

  /** The node's arena, where `allocate` hands out registered buffers on this group. */
  get nodeArena(): SharedArena {
    return this.sharedArena;
  }

  async allReduce(ctx: OpContext, dtype: CommDType, host: HostData, op: ReduceOp): Promise<void> {
    const registered = this.reducibleOffset(dtype, host);
    if (await stagedAllReduce(this.stagedStep(ctx), dtype, host, op, registered)) return;
    await twoLevelAllReduce(this.step(ctx), dtype, host, op);
  }

  async reduceScatter(
    ctx: OpContext,
    dtype: CommDType,
    input: HostData,
    output: HostData,
    op: ReduceOp,
  ): Promise<void> {
    // Node-mates read a registered input in place while this rank writes its output.
    const separate = !overlaps(bytesOf(input), bytesOf(output));
    const registered = separate ? this.reducibleOffset(dtype, input) : -1;
    const step = this.stagedStep(ctx);
    if (await stagedReduceScatter(step, dtype, input, output, op, registered)) return;
    await twoLevelReduceScatter(this.step(ctx), dtype, input, output, op);
  }

  /** `own` is this rank's shard, already at its place in `output`. */
  async allGather(
    ctx: OpContext,
    own: Uint8Array,
    output: Uint8Array,
    count: number,
    element: number,
  ): Promise<void> {
    const registered = this.sharedArena.owns(output.buffer) ? output.byteOffset : -1;
    const step = this.stagedStep(ctx);
    if (await stagedAllGather(step, own, output, count, element, registered)) return;
    await nodeAllGather(this.step(ctx), output, count, element);
  }

  /** The byte offset of a registered f32/i32 operand in the node's arena, else -1. */
  private reducibleOffset(dtype: CommDType, host: HostData): number {
    if (dtype !== 'f32' && dtype !== 'i32') return -1;
    return this.sharedArena.owns(host.buffer) ? host.byteOffset : -1;
  }

  private stagedStep(ctx: OpContext): StagedStep {
    const { sharedArena, topology, node, settings } = this;
    const local = this.step(ctx);
    const memory: ReduceMemory = {
      reduce: (...args) => sharedArena.reduce(...args),
      reduceTo: (...args) => sharedArena.reduceTo(...args),
      scale: (...args) => sharedArena.scale(...args),
      bytes: (offset, length) => new Uint8Array(sharedArena.buffer, offset, length),
    };
    return {
      ready: this.ensureRingSlots(),
      scratch: [this.ringSlots, ringStagingBytes(settings)],
      node: {
        rank: this.localRank,
        size: topology.nodes[node]!.length,
        arena: sharedArena,
        barrier: local.local.barrier,
        exchange: (words) => this.nodeWait(ctx, (waiting) => sharedArena.exchange(words, waiting)),
      },
      cross: {
        comm: local.cross.comm,
        layout: (op, kind, count, work) => ({
          ...ringLayout(memory, settings, op, kind, count, work),
          staging: this.ringSlots,
        }),
        segmentBytes: (chunkBytes) => segmentBytes(settings, 1, chunkBytes),
      },
      staging: (bytes) => this.staging(bytes),
    };
  }

  /** Whether the ring's receive slots are in the arena (allocated once); false in rounds-only mode. */
  private ensureRingSlots(): boolean {
    if (roundsOnly()) return false;
    if (this.ringSlots >= 0) return true;
    try {
      this.ringSlots = this.sharedArena.allocate(ringStagingBytes(this.settings));
      return true;
    } catch (error) {
      if (error instanceof RangeError) return false;
      throw error;
    }
  }

  /**
   * This op's staging buffer of at least `bytes` (the two alternate, see [Note: two-level node
   * phases on staged memory]), grown as needed; -1 past the limit or when the arena is full.
   */
  private staging(bytes: number): number {
    if (bytes > STAGING_LIMIT_BYTES) return -1;
    const arena = this.sharedArena;
    try {
      const which = this.nextStaging;
      this.nextStaging ^= 1;
      const held = this.stagings[which] ?? null;
      if (held !== null && held.bytes >= bytes) return held.offset;
      if (held !== null) arena.release(held.offset, held.bytes);
      this.stagings[which] = null;
      const size = Math.max(bytes, 64);
      this.stagings[which] = { offset: arena.allocate(size), bytes: size };
      return this.stagings[which]!.offset;
    } catch (error) {
      if (error instanceof RangeError) return -1;
      throw error;
    }
  }

  private step(ctx: OpContext): TwoLevelStep {
    const { topology, node, localRank, sharedArena } = this;
    const local: SharedStep = {
      rank: localRank,
      size: topology.nodes[node]!.length,
      arena: sharedArena,
      barrier: async () => {
        await this.nodeWait(ctx, (waiting) => sharedArena.barrier(waiting));
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
    };
  }

  /**
   * Waits at the node's barrier (or exchange): the node-mates it waits for join the op's other
   * waits (fingerprints from other nodes) for a deadline's message, instead of replacing them.
   */
  private async nodeWait<T>(
    ctx: OpContext,
    wait: (waiting: (ranks: readonly number[]) => void) => Promise<T>,
  ): Promise<T> {
    const { topology, node } = this;
    const added = new Set<number>();
    try {
      return await wait((ranks) => {
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
  }

  /** Scratch of `count` 4-byte elements, grown as needed and kept (ops of a group run one by one). */
  private scratch(kind: 'f32' | 'i32', count: number): WideData {
    if (this.scratchBuffer.byteLength < count * 4) this.scratchBuffer = new ArrayBuffer(count * 4);
    return kind === 'i32'
      ? new Int32Array(this.scratchBuffer, 0, count)
      : new Float32Array(this.scratchBuffer, 0, count);
  }
}
