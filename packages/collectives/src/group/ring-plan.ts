import { broadcastBytes, directAllGather, ringAllGather } from '../algorithms/gather.js';
import { directReduceScatter, type ReduceLayout, ringReduce } from '../algorithms/reduce.js';
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
import {
  type CollectivePlan,
  elementChunk,
  gatherOperands,
  scatterOperands,
  type PlanOptions,
} from './collective-plan.js';
import type { GroupView, OpContext } from './op-context.js';
import { RegisteredBuffers } from './registered-buffers.js';
import {
  type RingSettings,
  reduceLayout,
  ringLayout,
  ringStagingBytes,
  segmentBytes,
  streamedLayout,
} from './ring-layout.js';

/**
 * A group whose ranks share no arena (`tcp`, `ws`, `local`, sub-groups, a single rank): every
 * collective over messages, by direct exchange at or below `smallMessageBytes`, else over the
 * segmented ring; on `tcp` the ring runs on registered memory in place ([Note: registered memory
 * on the tcp transport]).
 */
export class RingPlan implements CollectivePlan {
  private readonly arena = new ReduceArena();
  readonly buffers: RegisteredBuffers;
  private readonly settings: RingSettings;

  constructor(
    private readonly group: GroupView,
    private readonly options: PlanOptions,
    /** Host arrays for tensor operands: see [Note: operand staging]. */
    private readonly staging: OperandStaging,
  ) {
    this.settings = { segmentBytes: options.segmentBytes, size: group.size };
    // Receive slots and, for a registered reduce-scatter, as many forward slots (`ringReduce`).
    const tcpBytes = 2 * ringStagingBytes(this.settings) + 64;
    this.buffers = new RegisteredBuffers(group, () => null, tcpBytes);
  }

  sharedArena(): null {
    return null;
  }

  async allReduce(ctx: OpContext, info: OperandInfo, op: ReduceOp): Promise<void> {
    const operand = await hostOperand('allReduce', info, false, this.staging);
    const count = info.count;
    if (this.group.size === 1 || count === 0) {
      operand.commit();
      return;
    }
    const direct = count * 4 <= this.options.smallMessageBytes;
    const scale = op === 'avg' ? 1 / this.group.size : null;
    const chunk = elementChunk(count, this.group.size);
    const memory = this.buffers.tcpMemory;
    const host = operand.host;
    if (!direct && memory !== null && !(host instanceof Uint16Array) && memory.owns(host.buffer)) {
      // [Note: registered memory on the tcp transport]: the ring runs on the buffer itself.
      const layout = ringLayout(memory, this.settings, op, info.dtype, count, host.byteOffset);
      await ringReduce(ctx, layout, chunk, {
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
      const bytes = bytesOf(host);
      const layout = streamedLayout(this.arena, this.settings, op, info.dtype, count);
      await ringReduce(ctx, layout, chunk, {
        input: bytes,
        result: bytes,
        resultBase: 0,
        gather: bytes,
        scale,
      });
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
    widen(info.dtype, host, this.workView(layout, count));
    if (direct) {
      await directReduceScatter(ctx, layout, () => [0, count]);
      if (scale !== null) this.arena.scale(layout.work, count, scale);
      narrow(info.dtype, this.workView(layout, count), host);
      operand.commit();
      return;
    }
    // f16/bf16: reduce-scatter in f32, round this rank's chunk once, and gather the 16-bit
    // results (half the bytes of gathering f32); every rank gets the owner's rounding.
    await ringReduce(ctx, layout, chunk, {
      input: null,
      result: null,
      resultBase: 0,
      gather: null,
      scale,
    });
    const [start, length] = chunk(this.group.rank);
    const bits = host as Uint16Array;
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

  async allGather(ctx: OpContext, inInfo: OperandInfo, outInfo: OperandInfo): Promise<void> {
    const { target, bytes, own, chunk, element } = await gatherOperands(
      this.group,
      inInfo,
      outInfo,
      this.staging,
    );
    if (bytes.byteLength <= this.options.smallMessageBytes)
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

  async reduceScatter(
    ctx: OpContext,
    inInfo: OperandInfo,
    outInfo: OperandInfo,
    op: ReduceOp,
  ): Promise<void> {
    const [source, target] = await scatterOperands(inInfo, outInfo, this.staging);
    const count = inInfo.count;
    const direct = count * 4 <= this.options.smallMessageBytes;
    const chunk = elementChunk(count, this.group.size);
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

  broadcast(ctx: OpContext, info: OperandInfo, root: number): Promise<void> {
    return broadcastOverMessages(ctx, this.group, this.options, this.staging, info, root);
  }

  private workView(layout: ReduceLayout, count: number): Float32Array | Int32Array {
    return layout.dtype === 'i32'
      ? this.arena.i32(layout.work, count)
      : this.arena.f32(layout.work, count);
  }
}

/** A broadcast over messages: direct at or below `smallMessageBytes`, else down the ring. */
export async function broadcastOverMessages(
  ctx: OpContext,
  group: GroupView,
  options: PlanOptions,
  staging: OperandStaging,
  info: OperandInfo,
  root: number,
): Promise<void> {
  const operand = await hostOperand('broadcast', info, group.rank !== root, staging);
  const bytes = bytesOf(operand.host);
  const settings = { segmentBytes: options.segmentBytes, size: group.size };
  await broadcastBytes(
    ctx,
    bytes,
    root,
    segmentBytes(settings, elementBytes(info.dtype), bytes.byteLength),
    bytes.byteLength <= options.smallMessageBytes,
  );
  if (group.rank !== root) operand.commit();
}
