import { keep, Tensor } from '@webshard/tensor-core';
import { hostArrayFor } from '@webshard/tensor-core/backend';
import { directView, type HostData, type OperandInfo } from '../operand.js';
import type { SharedOperand } from './handshake.js';

/**
 * How a rank's operands reach its communication worker ([Note: the communication worker
 * handshake] in handshake.ts): a typed array on a `SharedArrayBuffer` is handed over as is (no
 * copy); any other array, and a CPU tensor's storage, goes through a shared staging buffer, one
 * copy in at issue and one copy out at completion, on the rank's thread. A device tensor is read
 * first (asynchronously: the op, and the ops issued after it, are posted once the read is done,
 * so the worker still gets them in issue order) and written back at completion. A tensor is pinned (a
 * second handle on its storage) from the call until the op settles, as on every path ([Note:
 * operands are held until the op settles] in group/op-queue.ts).
 */

/** An operand handed over: what the worker gets, and what to do once the op settled. */
export interface StagedOperand {
  readonly shared: SharedOperand;
  /** Settles once `shared` holds the operand (a device tensor's read); null when it does now. */
  readonly ready: Promise<void> | null;
  /** Copies the result back (when written) and returns staging memory; once, after success. */
  readonly finish: () => void;
  /** Drops the pin and returns staging memory without copying; once, after failure. */
  readonly release: () => void;
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
   * when `read`), copied back by `finish` when `written`.
   */
  share(op: string, info: OperandInfo, read: boolean, written: boolean): StagedOperand {
    const { data, dtype, count } = info;
    const tensor = data instanceof Tensor ? keep(data.detach()) : null;
    const unpin = () => tensor?.free();
    const host = tensor === null ? (data as HostData) : directView(tensor, dtype);
    if (host !== null && host.buffer instanceof SharedArrayBuffer) {
      const { buffer, byteOffset, length } = host;
      const shared = { buffer, byteOffset, length, dtype };
      return { shared, ready: null, finish: unpin, release: unpin };
    }
    const bytes = count * (dtype === 'f32' || dtype === 'i32' ? 4 : 2);
    const buffer = this.take(bytes);
    const staged = new Uint8Array(buffer, 0, bytes);
    const release = () => {
      unpin();
      this.give(buffer);
    };
    const shared = { buffer, byteOffset: 0, length: count, dtype };
    if (host !== null) {
      const own = new Uint8Array(host.buffer, host.byteOffset, host.byteLength);
      if (read) staged.set(own);
      const finish = () => {
        if (written) own.set(staged);
        release();
      };
      return { shared, ready: null, finish, release };
    }
    // A device tensor: read into an ordinary array (and written back from one: a backend's write
    // may not take shared memory, see `hostOperand`), one more copy each way.
    const device = tensor!;
    const ordinary = hostArrayFor(dtype, count) as HostData;
    const own = new Uint8Array(ordinary.buffer, ordinary.byteOffset, ordinary.byteLength);
    const ready = read
      ? device.backend.read(device.kernel(op), ordinary).then(() => staged.set(own))
      : null;
    const finish = () => {
      if (written) {
        own.set(staged);
        device.backend.write(device.kernel(op), ordinary);
      }
      release();
    };
    return { shared, ready, finish, release };
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
