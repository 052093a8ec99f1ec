import { ArgumentError, Tensor } from '@webshard/tensor-core';
import { bytesOf, type CommDType, directView, type OperandInfo, overlaps } from '../operand.js';
import { RegisteredMemory } from '../registered-memory.js';
import { SEGMENT_SPAN, splitAddress } from '../registered-segments.js';
import type { SharedArena } from '../shared-arena.js';
import type { GroupView } from './op-context.js';

/**
 * Whether a reduce-scatter's input and output can take the registered path: both are host memory
 * (arrays, or CPU tensors over host memory) and the output does not lie inside the input, which
 * other ranks read while this rank writes it.
 */
export function registeredShards(input: OperandInfo, output: OperandInfo): boolean {
  const view = (info: OperandInfo) =>
    info.data instanceof Tensor ? directView(info.data, info.dtype) : info.data;
  const a = view(input);
  const b = view(output);
  return a !== null && b !== null && !overlaps(bytesOf(a), bytesOf(b));
}

/**
 * The buffers a group hands out with `allocate` and recognizes in its operands.
 *
 * [Note: registered buffers]
 * A buffer for this group's collectives, like NCCL's `ncclMemAlloc`. On the `shm` transport's
 * world group it lies in the shared arena that every rank maps, so an all-reduce whose operands
 * are registered buffers on every rank runs in place: each rank reduces its 1/n slice straight
 * from every rank's buffer into rank 0's (in rank order, as the copying schedule does, so the
 * bits are the same) and copies the result into the others', with no copy into or out of the
 * arena (`sharedAllReduceRegistered`); the ranks learn each other's offsets with the
 * fingerprint. A reduce-scatter of registered inputs sums this rank's shard straight from every
 * input (into the output when that is registered too), and an all-gather into registered outputs
 * writes each rank's shard straight into the others' outputs; an output inside its own input
 * falls back to copying. On the world group of several nodes of threads it lies in the node's
 * arena, where the node's phases read it in place ([Note: two-level node phases on staged
 * memory]). On `tcp` it lives in shared WASM memory of the group: an all-reduce of
 * it runs in place, and a reduce-scatter reads it in place (see [Note: registered memory on the
 * tcp transport]). Elsewhere (`ws`,
 * `local`, shm sub-groups, a single rank) it is an ordinary typed array, so code that allocates
 * its buckets here runs on every transport. Release it with `free`; using it after that is
 * undefined, as with any freed memory.
 */
export class RegisteredBuffers {
  /** Registered buffers this rank allocated (for `free`), by the array handed out. */
  private readonly handedOut = new WeakMap<object, { address: number; bytes: number }>();
  /** Registered buffers on `tcp` (see [Note: registered memory on the tcp transport]). */
  private tcp: RegisteredMemory | null = null;

  /**
   * `sharedArena`: the arena the group runs collectives through, or null; `tcpBytes`: the size of
   * the group's registered memory on `tcp`.
   */
  constructor(
    private readonly group: GroupView,
    private readonly sharedArena: () => SharedArena | null,
    private readonly tcpBytes: number,
  ) {}

  /**
   * Whether `allocate` hands out registered memory (the shm arena, tcp's shared WASM memory)
   * rather than ordinary arrays.
   */
  get registered(): boolean {
    if (this.sharedArena() !== null) return true;
    return this.group.transport.kind === 'tcp' && this.group.size > 1;
  }

  /** The group's registered memory on `tcp`, once a buffer was allocated there; else null. */
  get tcpMemory(): RegisteredMemory | null {
    return this.tcp;
  }

  /** `ProcessGroup.allocate`. */
  allocate(dtype: CommDType, count: number): Float32Array | Int32Array | Uint16Array {
    if (!Number.isSafeInteger(count) || count < 0) {
      throw new ArgumentError('allocate', `count must be a non-negative integer, got ${count}`);
    }
    const element = dtype === 'f16' || dtype === 'bf16' ? 2 : 4;
    const make = (buffer: ArrayBufferLike, offset: number) =>
      element === 2
        ? new Uint16Array(buffer, offset, count)
        : dtype === 'i32'
          ? new Int32Array(buffer, offset, count)
          : new Float32Array(buffer, offset, count);
    const bytes = count * element;
    const shared = this.sharedArena();
    let array: Float32Array | Int32Array | Uint16Array;
    let address: number;
    if (shared !== null) {
      // [Note: growing registered memory] in registered-segments.ts.
      address = shared.registered.allocate(bytes);
      const { segment, offset } = splitAddress(address);
      array = make(shared.registered.segment(segment).buffer, offset);
    } else {
      const memory = this.tcpRegisteredMemory(true);
      if (memory === null) return make(new ArrayBuffer(bytes), 0);
      address = memory.allocate(bytes); // zeroed
      array = make(memory.buffer, address);
    }
    this.handedOut.set(array, { address, bytes });
    return array;
  }

  /** `ProcessGroup.free`. */
  free(buffer: Float32Array | Int32Array | Uint16Array): void {
    const entry = this.handedOut.get(buffer);
    const memory = this.sharedArena()?.registered ?? this.tcpRegisteredMemory(false);
    if (entry === undefined || memory === null) return;
    this.handedOut.delete(buffer);
    memory.release(entry.address, entry.bytes);
  }

  /**
   * Where registered buffers live on `tcp`, created on first use (`create`); null on other
   * transports and for a single rank.
   */
  private tcpRegisteredMemory(create: boolean): RegisteredMemory | null {
    if (this.tcp !== null || !create) return this.tcp;
    if (this.group.transport.kind !== 'tcp' || this.group.size === 1) return null;
    this.tcp = new RegisteredMemory(this.tcpBytes, this.group.rank);
    return this.tcp;
  }

  /**
   * The address a reduce-scatter announces in its fingerprint, from which every rank picks the same
   * schedule: its input's where any rank's output can be served by the registered one (the input
   * in segment 0, an output elsewhere staged through segment 0's slots; or the output in the
   * input's segment, written in place), else -1, and then every rank copies. A rank's own output
   * alone must never decide: ranks whose outputs lay in different segments took different schedules
   * and their collectives diverged.
   */
  reduceScatterAddress(input: OperandInfo, output: OperandInfo): number {
    // An output inside the input would be written while other ranks read it: copy instead.
    if (!registeredShards(input, output)) return -1;
    const address = this.offsetOf(input);
    if (address < 0) return -1;
    const { segment } = splitAddress(address);
    if (segment === 0) return address;
    const written = this.offsetOf(output);
    return written >= 0 && splitAddress(written).segment === segment ? address : -1;
  }

  /**
   * The operand's registered address in the shared arena's segments (`splitAddress`), or -1 when
   * it is not registered memory (or, for the reductions, not of a 4-byte dtype the kernels reduce
   * in place).
   */
  offsetOf(info: OperandInfo, anyDtype = false): number {
    const arena = this.sharedArena();
    if (arena === null) return -1;
    if (!anyDtype && info.dtype !== 'f32' && info.dtype !== 'i32') return -1;
    // A CPU tensor over a registered buffer (tensorFromHostArray) counts as that buffer.
    const data = info.data instanceof Tensor ? directView(info.data, info.dtype) : info.data;
    if (data === null) return -1;
    const segment = arena.registered.segmentOf(data.buffer);
    return segment < 0 ? -1 : segment * SEGMENT_SPAN + data.byteOffset;
  }
}
