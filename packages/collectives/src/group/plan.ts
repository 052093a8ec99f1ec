import { broadcastBytes, directAllGather, placeOwn, ringAllGather } from '../algorithms/gather.js';
import { directReduceScatter, type ReduceLayout, ringReduce } from '../algorithms/reduce.js';
import {
  type SharedStep,
  sharedAllGather,
  sharedAllGatherRegistered,
  sharedAllReduce,
  sharedAllReduceRegistered,
  sharedBroadcast,
  sharedReduceScatter,
  sharedReduceScatterRegistered,
} from '../algorithms/shared.js';
import { ReduceArena, type ReduceOp } from '../kernels/reduce.js';
import {
  bytesOf,
  elementBytes,
  hostOperand,
  narrow,
  type OperandInfo,
  overlaps,
  widen,
} from '../operand.js';
import type { OperandStaging } from '../operand-staging.js';
import { shardRange } from '../shard.js';
import type { SharedArena } from '../shared-arena.js';
import { splitAddress } from '../registered-segments.js';
import { registeredOffsetsOf } from './fingerprint.js';
import type { GroupView, OpContext } from './op-context.js';
import { RegisteredBuffers } from './registered-buffers.js';
import { TwoLevelPlan } from '../two-level/two-level-plan.js';
import {
  type RingSettings,
  reduceLayout,
  ringLayout,
  ringStagingBytes,
  segmentBytes,
  streamedLayout,
} from './ring-layout.js';

/** The group settings the choice of algorithm depends on. */
export interface PlanOptions {
  readonly segmentBytes: number | 'auto';
  readonly smallMessageBytes: number;
  readonly sharedMemory: boolean;
}

/**
 * How one group runs each collective: through the transport's shared arena (the world group on
 * `shm`), in two levels (the world group of nodes of threads: `TwoLevelPlan`), on registered
 * memory (`shm`, `tcp`), by direct exchange at or below `smallMessageBytes`, or over the
 * segmented ring; and the staging each needs. The bodies run inside the op's turn,
 * after (or, over messages, beside) the fingerprint exchange.
 */
export class CollectivePlan {
  private readonly arena = new ReduceArena();
  /** The buffers `allocate` hands out, and the check of operands against them. */
  readonly buffers: RegisteredBuffers;
  private readonly settings: RingSettings;
  /** The world group of a node of several: [Note: two-level collectives]. */
  private readonly twoLevel: TwoLevelPlan | null;

  /** `world`: whether the group is its transport's world group (the one `fromTransport` makes). */
  constructor(
    private readonly group: GroupView,
    private readonly options: PlanOptions,
    private readonly world: boolean,
    /** Host arrays for tensor operands: see [Note: operand staging]. */
    private readonly staging: OperandStaging,
  ) {
    this.settings = { segmentBytes: options.segmentBytes, size: group.size };
    // Receive slots and, for a registered reduce-scatter, as many forward slots (`ringReduce`).
    const tcpBytes = 2 * ringStagingBytes(this.settings) + 64;
    // Two levels: registered buffers in the node's arena ([Note: two-level node phases on
    // staged memory] in two-level/staged-schedule.ts).
    this.buffers = new RegisteredBuffers(
      group,
      () => this.sharedArena() ?? this.twoLevel?.nodeArena ?? null,
      tcpBytes,
    );
    this.twoLevel = TwoLevelPlan.for(group, world, options);
  }

  /** The arena this group runs collectives (and keeps registered buffers) through, or null. */
  sharedArena(): SharedArena | null {
    const arena = this.group.transport.sharedArena;
    if (arena === undefined || !this.options.sharedMemory || !this.world || this.group.size === 1)
      return null;
    return arena;
  }

  /** `ProcessGroup.allReduce`'s body. */
  async allReduce(ctx: OpContext, info: OperandInfo, op: ReduceOp): Promise<void> {
    const operand = await hostOperand('allReduce', info, false, this.staging);
    if (this.twoLevel !== null) {
      await this.twoLevel.allReduce(ctx, info.dtype, operand.host, op);
      operand.commit();
      return;
    }
    const count = info.count;
    const step = this.sharedStep(ctx);
    const offsets = registeredOffsetsOf(ctx, this.group.size);
    if (step !== null && offsets !== null) {
      await sharedAllReduceRegistered(step, info.dtype as 'f32' | 'i32', offsets, count, op);
      return;
    }
    if (step !== null) {
      this.staging.staged(2 * operand.host.byteLength);
      await sharedAllReduce(step, info.dtype, operand.host, op);
      operand.commit();
      return;
    }
    if (this.group.size === 1 || count === 0) {
      operand.commit();
      return;
    }
    const direct = count * 4 <= this.options.smallMessageBytes;
    const scale = op === 'avg' ? 1 / this.group.size : null;
    const memory = this.buffers.tcpMemory;
    const host = operand.host;
    if (!direct && memory !== null && !(host instanceof Uint16Array) && memory.owns(host.buffer)) {
      // [Note: registered memory on the tcp transport]: the ring runs on the buffer itself.
      const layout = ringLayout(memory, this.settings, op, info.dtype, count, host.byteOffset);
      await ringReduce(ctx, layout, this.elementChunk(count), {
        input: null,
        result: null,
        resultBase: 0,
        gather: bytesOf(host),
        scale,
      });
      return;
    }
    // Every path below copies the operand into the group's work area and the result out of it.
    this.staging.staged(2 * host.byteLength);
    if (!direct && (info.dtype === 'f32' || info.dtype === 'i32')) {
      // [Note: the fused ring]: the user's buffer is read, reduced into and gathered in place.
      const bytes = bytesOf(operand.host);
      await ringReduce(
        ctx,
        streamedLayout(this.arena, this.settings, op, info.dtype, count),
        this.elementChunk(count),
        {
          input: bytes,
          result: bytes,
          resultBase: 0,
          gather: bytes,
          scale,
        },
      );
      operand.commit();
      return;
    }
    const layout = reduceLayout(
      this.arena,
      this.settings,
      op,
      info.dtype,
      count,
      direct ? count : 0,
    );
    widen(info.dtype, operand.host, this.workView(layout, count));
    if (direct) {
      await directReduceScatter(ctx, layout, () => [0, count]);
      if (scale !== null) this.arena.scale(layout.work, count, scale);
      narrow(info.dtype, this.workView(layout, count), operand.host);
      operand.commit();
      return;
    }
    // f16/bf16: reduce-scatter in f32, round this rank's chunk once, and gather the 16-bit
    // results (half the bytes of gathering f32); every rank gets the owner's rounding.
    const chunk = this.elementChunk(count);
    await ringReduce(ctx, layout, chunk, {
      input: null,
      result: null,
      resultBase: 0,
      gather: null,
      scale,
    });
    const [start, length] = chunk(this.group.rank);
    const bits = operand.host as Uint16Array;
    narrow(
      info.dtype,
      this.arena.f32(layout.work + start * 4, length),
      bits.subarray(start, start + length),
    );
    await ringAllGather(
      ctx,
      bytesOf(bits),
      bytesOf(bits.subarray(start, start + length)),
      (c) => {
        const [first, size] = chunk(c);
        return [first * 2, size * 2];
      },
      segmentBytes(this.settings, 2, length * 2),
    );
    operand.commit();
  }

  /** `ProcessGroup.allGather`'s body. */
  async allGather(ctx: OpContext, inInfo: OperandInfo, outInfo: OperandInfo): Promise<void> {
    const [source, target] = await Promise.all([
      hostOperand('allGather', inInfo, false, this.staging),
      hostOperand('allGather', outInfo, true, this.staging),
    ]);
    const element = elementBytes(outInfo.dtype);
    const chunk = (c: number): [number, number] => {
      const range = shardRange(outInfo.count, this.group.size, c);
      return [range.start * element, range.count * element];
    };
    const bytes = bytesOf(target.host);
    let own = bytesOf(source.host);
    if (overlaps(own, bytes)) {
      // An input inside the output but not at its place would be overwritten while it is
      // sent: put it in place first (`set` copies overlapping ranges correctly).
      const [start, length] = chunk(this.group.rank);
      placeOwn(bytes, own, start);
      own = bytes.subarray(start, start + length);
    }
    if (this.twoLevel !== null) {
      placeOwn(bytes, own, chunk(this.group.rank)[0]);
      const [start, length] = chunk(this.group.rank);
      await this.twoLevel.allGather(
        ctx,
        bytes.subarray(start, start + length),
        bytes,
        outInfo.count,
        element,
      );
      target.commit();
      return;
    }
    const step = this.sharedStep(ctx);
    const offsets = registeredOffsetsOf(ctx, this.group.size);
    if (step !== null) {
      placeOwn(bytes, own, chunk(this.group.rank)[0]);
      if (offsets !== null) await sharedAllGatherRegistered(step, own, offsets, chunk);
      else {
        // Its own shard into its slot, every other rank's out of theirs.
        this.staging.staged(bytes.byteLength);
        await sharedAllGather(step, own, bytes, chunk);
      }
    } else if (bytes.byteLength <= this.options.smallMessageBytes)
      await directAllGather(ctx, bytes, own, chunk);
    else
      await ringAllGather(
        ctx,
        bytes,
        own,
        chunk,
        segmentBytes(this.settings, element, chunk(0)[1]),
      );
    target.commit();
  }

  /** `ProcessGroup.reduceScatter`'s body. */
  async reduceScatter(
    ctx: OpContext,
    inInfo: OperandInfo,
    outInfo: OperandInfo,
    op: ReduceOp,
  ): Promise<void> {
    const [source, target] = await Promise.all([
      hostOperand('reduceScatter', inInfo, false, this.staging),
      hostOperand('reduceScatter', outInfo, true, this.staging),
    ]);
    if (this.twoLevel !== null) {
      await this.twoLevel.reduceScatter(ctx, inInfo.dtype, source.host, target.host, op);
      target.commit();
      return;
    }
    const count = inInfo.count;
    const step = this.sharedStep(ctx);
    const registered = registeredOffsetsOf(ctx, this.group.size);
    // An output in the inputs' segment is written in place; another is staged through segment 0's
    // slots, so inputs elsewhere then take the copying schedule.
    const outputAddress = this.buffers.offsetOf(outInfo);
    const outputOffset =
      registered !== null &&
      outputAddress >= 0 &&
      splitAddress(outputAddress).segment === registered.segment
        ? splitAddress(outputAddress).offset
        : -1;
    const offsets =
      registered !== null && (outputOffset >= 0 || registered.segment === 0) ? registered : null;
    if (step !== null && offsets !== null) {
      if (outputOffset < 0) this.staging.staged(target.host.byteLength);
      await sharedReduceScatterRegistered(
        step,
        inInfo.dtype as 'f32' | 'i32',
        offsets,
        count,
        target.host,
        outputOffset,
        op,
      );
      target.commit();
      return;
    }
    if (step !== null) {
      this.staging.staged(source.host.byteLength + target.host.byteLength);
      await sharedReduceScatter(step, inInfo.dtype, source.host, target.host, op);
      target.commit();
      return;
    }
    const direct = count * 4 <= this.options.smallMessageBytes;
    const chunk = this.elementChunk(count);
    const [start, length] = chunk(this.group.rank);
    const scale = op === 'avg' ? 1 / this.group.size : null;
    const input = bytesOf(source.host);
    const output = bytesOf(target.host);
    const memory = this.buffers.tcpMemory;
    const ring =
      !direct &&
      this.group.size > 1 &&
      (inInfo.dtype === 'f32' || inInfo.dtype === 'i32') &&
      !overlaps(input, output);
    if (ring) {
      // Reads `input` piece by piece while writing `output`: only for separate buffers. A
      // registered input is read in place ([Note: registered memory on the tcp transport]).
      const registered = memory?.owns(input.buffer) === true;
      const inPlaceOutput = registered && memory.owns(output.buffer);
      this.staging.staged(
        (registered ? 0 : input.byteLength) + (inPlaceOutput ? 0 : output.byteLength),
      );
      await ringReduce(
        ctx,
        registered
          ? ringLayout(memory, this.settings, op, inInfo.dtype, count, -1)
          : streamedLayout(this.arena, this.settings, op, inInfo.dtype, count),
        chunk,
        {
          input,
          result: output,
          resultBase: start,
          gather: null,
          scale,
          registered: registered ? { result: inPlaceOutput ? output.byteOffset : -1 } : undefined,
        },
      );
      target.commit();
      return;
    }
    const layout = reduceLayout(
      this.arena,
      this.settings,
      op,
      inInfo.dtype,
      count,
      direct ? Math.ceil(count / this.group.size) : 0,
    );
    this.staging.staged(source.host.byteLength + target.host.byteLength);
    widen(inInfo.dtype, source.host, this.workView(layout, count));
    if (this.group.size > 1 && count > 0) {
      if (direct) {
        await directReduceScatter(ctx, layout, chunk);
        if (scale !== null) this.arena.scale(layout.work + start * 4, length, scale);
      } else {
        await ringReduce(ctx, layout, chunk, {
          input: null,
          result: null,
          resultBase: 0,
          gather: null,
          scale,
        });
      }
    } else if (scale !== null) {
      this.arena.scale(layout.work + start * 4, length, scale);
    }
    const shard =
      layout.dtype === 'i32'
        ? this.arena.i32(layout.work + start * 4, length)
        : this.arena.f32(layout.work + start * 4, length);
    narrow(inInfo.dtype, shard, target.host);
    target.commit();
  }

  /** `ProcessGroup.broadcast`'s body. */
  async broadcast(ctx: OpContext, info: OperandInfo, root: number): Promise<void> {
    const operand = await hostOperand('broadcast', info, this.group.rank !== root, this.staging);
    const bytes = bytesOf(operand.host);
    const step = this.sharedStep(ctx);
    if (step !== null) {
      this.staging.staged(bytes.byteLength);
      await sharedBroadcast(step, bytes, root);
    } else
      await broadcastBytes(
        ctx,
        bytes,
        root,
        segmentBytes(this.settings, elementBytes(info.dtype), bytes.byteLength),
        bytes.byteLength <= this.options.smallMessageBytes,
      );
    if (this.group.rank !== root) operand.commit();
  }

  /** The shared-memory schedule's view of the op, when this group runs collectives that way. */
  private sharedStep(ctx: OpContext): SharedStep | null {
    const arena = this.sharedArena();
    if (arena === null) return null;
    return {
      rank: this.group.rank,
      size: this.group.size,
      arena,
      barrier: async () => {
        await arena.barrier((ranks) => ctx.waitFor(ranks));
        ctx.waitFor([]);
      },
    };
  }

  /** Chunk `c` of `count` elements as `[start, length]` in elements (`shardRange`). */
  private elementChunk(count: number): (c: number) => [number, number] {
    return (c) => {
      const range = shardRange(count, this.group.size, c);
      return [range.start, range.count];
    };
  }

  private workView(layout: ReduceLayout, count: number): Float32Array | Int32Array {
    return layout.dtype === 'i32'
      ? this.arena.i32(layout.work, count)
      : this.arena.f32(layout.work, count);
  }
}
