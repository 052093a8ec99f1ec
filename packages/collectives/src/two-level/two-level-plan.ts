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
import {
  bytesOf,
  type CommDType,
  type HostData,
  hostOperand,
  type OperandInfo,
  overlaps,
} from '../operand.js';
import { shardRange } from '../shard.js';
import type { SharedArena } from '../shared-arena.js';
import type { NodeTopology } from './topology.js';
import { twoLevelOf } from './two-level-transport.js';
import { placeOwn } from '../algorithms/gather.js';
import {
  type CollectivePlan,
  gatherOperands,
  type PlanOptions,
  scatterOperands,
} from '../group/collective-plan.js';
import type { GroupView, OpContext } from '../group/op-context.js';
import { RegisteredBuffers } from '../group/registered-buffers.js';
import { broadcastOverMessages } from '../group/ring-plan.js';
import type { OperandStaging } from '../operand-staging.js';
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
export class TwoLevelPlan implements CollectivePlan {
  /** The buffers `allocate` hands out: in the node's arena. */
  readonly buffers: RegisteredBuffers;
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
    private readonly group: GroupView,
    private readonly topology: NodeTopology,
    /** The node's arena, where `allocate` hands out registered buffers on this group. */
    private readonly nodeArena: SharedArena,
    private readonly options: PlanOptions,
    /** Host arrays for tensor operands: see [Note: operand staging]. */
    private readonly operandStaging: OperandStaging,
  ) {
    this.node = topology.nodeOf(group.rank);
    this.localRank = topology.localRankOf(group.rank);
    this.settings = { segmentBytes: options.segmentBytes, size: topology.nodes.length };
    // Registered buffers in the node's arena ([Note: two-level node phases on staged memory] in
    // staged-schedule.ts); the tcp size is the one every plan passes (unused here).
    const groupRing = { segmentBytes: options.segmentBytes, size: group.size };
    this.buffers = new RegisteredBuffers(
      group,
      () => nodeArena,
      2 * ringStagingBytes(groupRing) + 64,
    );
  }

  /** The plan of `group` when it is a two-level transport's world group, else null. */
  static for(
    group: GroupView,
    world: boolean,
    options: PlanOptions,
    staging: OperandStaging,
  ): TwoLevelPlan | null {
    const transport = twoLevelOf(group.transport);
    if (transport === null || !world || !options.sharedMemory) return null;
    const { topology } = transport;
    const localSize = topology.localSize;
    if (localSize === null || localSize < 2 || topology.nodes.length < 2) return null;
    return new TwoLevelPlan(group, topology, transport.local.sharedArena, options, staging);
  }

  /** This group has no one arena: it runs the node's phases through `nodeArena`. */
  sharedArena(): null {
    return null;
  }

  async allReduce(ctx: OpContext, info: OperandInfo, op: ReduceOp): Promise<void> {
    const operand = await hostOperand('allReduce', info, false, this.operandStaging);
    const { dtype } = info;
    const host = operand.host;
    const registered = this.reducibleOffset(dtype, host);
    if (!(await stagedAllReduce(this.stagedStep(ctx), dtype, host, op, registered)))
      await twoLevelAllReduce(this.step(ctx), dtype, host, op);
    operand.commit();
  }

  async reduceScatter(
    ctx: OpContext,
    inInfo: OperandInfo,
    outInfo: OperandInfo,
    op: ReduceOp,
  ): Promise<void> {
    const [source, target] = await scatterOperands(inInfo, outInfo, this.operandStaging);
    const { dtype } = inInfo;
    const input = source.host;
    const output = target.host;
    // Node-mates read a registered input in place while this rank writes its output.
    const separate = !overlaps(bytesOf(input), bytesOf(output));
    const registered = separate ? this.reducibleOffset(dtype, input) : -1;
    const step = this.stagedStep(ctx);
    if (!(await stagedReduceScatter(step, dtype, input, output, op, registered)))
      await twoLevelReduceScatter(this.step(ctx), dtype, input, output, op);
    target.commit();
  }

  async allGather(ctx: OpContext, inInfo: OperandInfo, outInfo: OperandInfo): Promise<void> {
    const { target, bytes, own, chunk, element } = await gatherOperands(
      this.group,
      inInfo,
      outInfo,
      this.operandStaging,
    );
    const [start, length] = chunk(this.group.rank);
    placeOwn(bytes, own, start);
    // This rank's shard, now at its place in the output.
    const placed = bytes.subarray(start, start + length);
    const registered = this.nodeArena.owns(bytes.buffer) ? bytes.byteOffset : -1;
    const step = this.stagedStep(ctx);
    if (!(await stagedAllGather(step, placed, bytes, outInfo.count, element, registered)))
      await nodeAllGather(this.step(ctx), bytes, outInfo.count, element);
    target.commit();
  }

  /** Over the routed messages, as on any transport. */
  broadcast(ctx: OpContext, info: OperandInfo, root: number): Promise<void> {
    return broadcastOverMessages(ctx, this.group, this.options, this.operandStaging, info, root);
  }

  /** The byte offset of a registered f32/i32 operand in the node's arena, else -1. */
  private reducibleOffset(dtype: CommDType, host: HostData): number {
    if (dtype !== 'f32' && dtype !== 'i32') return -1;
    return this.nodeArena.owns(host.buffer) ? host.byteOffset : -1;
  }

  private stagedStep(ctx: OpContext): StagedStep {
    const { nodeArena: sharedArena, topology, node, settings } = this;
    const local = this.step(ctx);
    const memory: ReduceMemory = {
      reduce: (...args) => sharedArena.reduce(...args),
      reduceTo: (...args) => sharedArena.reduceTo(...args),
      scale: (...args) => sharedArena.scale(...args),
      zero: (...args) => sharedArena.zero(...args),
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
      this.ringSlots = this.nodeArena.allocate(ringStagingBytes(this.settings));
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
    const arena = this.nodeArena;
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
    const { topology, node, localRank, nodeArena: sharedArena } = this;
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
      expect: (peer, bytes, messages) =>
        ctx.expect(topology.rankOf(peer, localRank), bytes, messages),
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
