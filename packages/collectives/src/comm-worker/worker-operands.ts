import { ArgumentError, keep, Tensor } from '@webshard/tensor-core';
import { directView, type HostData, type OperandInfo } from '../operand.js';
import type { SharedOperand } from './handshake.js';

/**
 * How a rank's operands reach its communication worker ([Note: the communication worker
 * handshake] in handshake.ts): a typed array on a `SharedArrayBuffer` is handed over as is (no
 * copy); any other array, and a CPU tensor's storage, goes through a shared staging buffer, one
 * copy in at issue and one copy out at completion, on the rank's thread. A tensor is pinned (a
 * second handle on its storage) from the call until the op settles, as on every path ([Note:
 * operands are held until the op settles] in group/op-queue.ts).
 */

/** An operand handed over: what the worker gets, and what to do once the op settled. */
export interface StagedOperand {
  readonly shared: SharedOperand;
  /** Copies the result back (when written) and returns staging memory; once, after success. */
  readonly finish: () => void;
  /** Drops the pin and returns staging memory without copying; once, after failure. */
  readonly release: () => void;
}

/** The host elements of a checked operand: the array itself, or a CPU tensor's storage. */
function hostElements(op: string, rank: number, info: OperandInfo): HostData {
  if (!(info.data instanceof Tensor)) return info.data;
  const view = directView(info.data, info.dtype);
  if (view === null)
    throw new ArgumentError(
      op,
      `rank ${rank}: the communication worker takes CPU tensors and typed arrays, not a tensor of the ${info.data.backend.kind} backend`,
    );
  return view;
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
   * now when `read`), copied back by `finish` when `written`. Throws for a tensor that is not on
   * the CPU backend, before anything is taken.
   */
  share(
    op: string,
    rank: number,
    info: OperandInfo,
    read: boolean,
    written: boolean,
  ): StagedOperand {
    const data = hostElements(op, rank, info);
    const pinned = info.data instanceof Tensor ? keep(info.data.detach()) : null;
    const unpin = () => pinned?.free();
    const { dtype } = info;
    if (data.buffer instanceof SharedArrayBuffer) {
      const { buffer, byteOffset, length } = data;
      return { shared: { buffer, byteOffset, length, dtype }, finish: unpin, release: unpin };
    }
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const buffer = this.take(data.byteLength);
    const staged = new Uint8Array(buffer, 0, data.byteLength);
    if (read) staged.set(bytes);
    const release = () => {
      unpin();
      this.give(buffer);
    };
    const finish = () => {
      if (written) bytes.set(staged);
      release();
    };
    return { shared: { buffer, byteOffset: 0, length: data.length, dtype }, finish, release };
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
