import { ArgumentError, ShapeError } from '@webshard/tensor-core';
import { type CollectiveData, type CommDType, describeOperand, type HostData } from '../operand.js';
import { shardRange } from '../shard.js';
import type { SharedOperand } from './handshake.js';

/**
 * How a rank's operands reach its communication worker ([Note: the communication worker
 * handshake] in handshake.ts): a typed array on a `SharedArrayBuffer` is handed over as is (no
 * copy); any other array goes through a shared staging buffer, one copy in at issue and one copy
 * out at completion, on the rank's thread.
 */

/** A checked host operand: a typed array and its dtype. */
export interface HostArray {
  readonly data: HostData;
  readonly dtype: CommDType;
}

/** The checked typed array of an operand; tensors are refused on this path (not yet taken). */
export function hostArray(op: string, data: CollectiveData, dtype?: 'f16' | 'bf16'): HostArray {
  const info = describeOperand(op, data, dtype);
  if (!ArrayBuffer.isView(info.data))
    throw new ArgumentError(
      op,
      'the communication worker path takes typed arrays, not tensors, yet',
    );
  return { data: info.data as HostData, dtype: info.dtype };
}

/** Throws unless `shard` is rank `rank`'s shard of `full` over `size` ranks (`shardRange`). */
export function checkShard(
  op: string,
  rank: number,
  size: number,
  shard: HostArray,
  full: HostArray,
  which: 'input' | 'output',
): void {
  const expected = shardRange(full.data.length, size, rank).count;
  if (shard.dtype !== full.dtype || shard.data.length !== expected) {
    throw new ShapeError(
      op,
      [[shard.data.length], [full.data.length]],
      `rank ${rank}: expected ${which} of ${expected} ${full.dtype} elements (shard ${rank} of ${full.data.length} over ${size} ranks), got ${shard.data.length} ${shard.dtype}`,
    );
  }
}

/** Most staging buffers of one size kept for reuse. */
const KEEP_PER_SIZE = 4;

/**
 * Shared staging buffers, kept by exact byte size and reused (allocating 16 MiB costs up to
 * 1.7 ms here).
 */
export class StagingPool {
  private readonly free = new Map<number, SharedArrayBuffer[]>();

  /**
   * The operand as the worker gets it: its own memory when shared, else a staging copy (filled
   * now when `read`), with the function that copies the result back when `written` and returns
   * the staging buffer; call it once the op completed.
   */
  share(host: HostArray, read: boolean, written: boolean): [SharedOperand, () => void] {
    const { data, dtype } = host;
    if (data.buffer instanceof SharedArrayBuffer) {
      const { buffer, byteOffset, length } = data;
      return [{ buffer, byteOffset, length, dtype }, () => {}];
    }
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const buffer = this.take(data.byteLength);
    const staged = new Uint8Array(buffer, 0, data.byteLength);
    if (read) staged.set(bytes);
    const finish = () => {
      if (written) bytes.set(staged);
      this.give(buffer);
    };
    return [{ buffer, byteOffset: 0, length: data.length, dtype }, finish];
  }

  private take(bytes: number): SharedArrayBuffer {
    const size = Math.max(1, bytes);
    return this.free.get(size)?.pop() ?? new SharedArrayBuffer(size);
  }

  private give(buffer: SharedArrayBuffer): void {
    let list = this.free.get(buffer.byteLength);
    if (list === undefined) {
      list = [];
      this.free.set(buffer.byteLength, list);
    }
    if (list.length < KEEP_PER_SIZE) list.push(buffer);
  }
}
