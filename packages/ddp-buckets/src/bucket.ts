import type { ProcessGroup, Work } from '@webshard/collectives';
import { copy_, type DType, keep, Tensor } from '@webshard/tensor-core';
import {
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  hostArrayOf,
} from '@webshard/tensor-core/backend';

/** The dtypes a bucket moves (the collectives' float dtypes). */
export type BucketDType = 'f32' | 'f16' | 'bf16';
type HostBuffer = Float32Array | Uint16Array;

/**
 * [Note: what a bucket copies]
 * A bucket is one flat host buffer from `group.allocate` (registered memory: on `shm` and `tcp`
 * the all-reduce runs on it in place, elsewhere it is an ordinary array), reused every iteration.
 * - CPU backend: each gradient is copied straight from its storage into the buffer (one copy in),
 *   and back (one copy out, with the averaging scale folded in). No other copy.
 * - WebGPU (any backend whose storage is not host memory): the gradients are copied on the device
 *   into one flat device tensor, read back once per bucket, reduced, written back once per bucket,
 *   and copied on the device into the gradients (or, with `retainAllreduceBuffers`, the gradients
 *   become views of that flat tensor).
 * - 16-bit gradients with `allreduceAlwaysFp32` are widened to f32 while packed and rounded back
 *   while unpacked; without it the buffer holds their bits, which the collectives widen, sum in f32
 *   and round once (not in place: registered memory is only reduced in place for 4-byte dtypes).
 */
export class Bucket {
  /** The registered host buffer the all-reduce runs on. */
  readonly host: HostBuffer;
  /** Element offset of each parameter in the bucket. */
  readonly offsets: readonly number[];
  readonly size: number;
  /** A flat device tensor of the gradients' dtype (device backends, or retained buffers). */
  private flat: Tensor | null = null;
  private readonly views = new WeakSet<Tensor>();

  constructor(
    private readonly group: ProcessGroup,
    /** The parameters, in bucket order. */
    readonly params: readonly Tensor[],
    /** The gradients' dtype. */
    readonly dtype: BucketDType,
    /** The dtype the buffer holds and the all-reduce moves. */
    readonly commDType: BucketDType,
  ) {
    const offsets: number[] = [];
    let size = 0;
    for (const p of params) {
      offsets.push(size);
      size += p.size;
    }
    this.offsets = offsets;
    this.size = size;
    this.host = group.allocate(commDType, size) as HostBuffer;
  }

  /** Copy every parameter's gradient into the buffer, times `scale`. Gradients must exist. */
  async pack(scale: number): Promise<void> {
    const direct = this.params.map((p) => hostView(p.grad!));
    if (direct.every((v) => v !== null)) {
      this.params.forEach((_, i) => {
        convertInto(this.dtype, direct[i]!, this.commDType, this.host, this.offsets[i]!, scale);
      });
      return;
    }
    const flat = this.flatTensor();
    this.params.forEach((p, i) => {
      const view = flat.view(p.shape, this.offsets[i]!);
      copy_(view, p.grad!);
      view.free();
    });
    const raw = (await flat.readRaw()) as HostBuffer;
    convertInto(this.dtype, raw, this.commDType, this.host, 0, scale);
  }

  /** Start the all-reduce (sum) of the buffer. */
  allReduce(): Work {
    return this.commDType === 'f32'
      ? this.group.allReduce(this.host)
      : this.group.allReduce(this.host, { dtype: this.commDType });
  }

  /**
   * Write the reduced buffer, times `scale`, back into the gradients; with `retain` the gradients
   * become views of one flat tensor holding the bucket.
   */
  unpack(scale: number, retain: boolean): void {
    const direct = retain ? null : this.params.map((p) => hostView(p.grad!));
    if (direct?.every((v) => v !== null)) {
      this.params.forEach((p, i) => {
        const offset = this.offsets[i]!;
        const slice = this.host.subarray(offset, offset + p.size);
        convertInto(this.commDType, slice, this.dtype, direct[i]!, 0, scale);
      });
      return;
    }
    const flat = this.flatTensor();
    const flatHost = hostView(flat);
    if (flatHost !== null) {
      convertInto(this.commDType, this.host, this.dtype, flatHost, 0, scale);
    } else {
      // A plain array: the webgpu package's writeBuffer cannot take a view on shared memory.
      const plain = this.dtype === 'f32' ? new Float32Array(this.size) : new Uint16Array(this.size);
      convertInto(this.commDType, this.host, this.dtype, plain, 0, scale);
      flat.backend.write(flat.kernel('unpack'), plain);
    }
    this.params.forEach((p, i) => {
      const grad = p.grad!;
      if (retain) {
        if (this.views.has(grad)) return;
        const view = keep(flat.view(p.shape, this.offsets[i]!));
        this.views.add(view);
        p.grad = view;
        grad.free();
      } else {
        const view = flat.view(p.shape, this.offsets[i]!);
        copy_(grad, view);
        view.free();
      }
    });
  }

  /** Release the buffer and the flat tensor (retained gradient views keep their storage). */
  dispose(): void {
    this.group.free(this.host);
    this.flat?.free();
    this.flat = null;
  }

  private flatTensor(): Tensor {
    if (this.flat === null) {
      const backend = this.params[0]!.backend;
      this.flat = keep(Tensor.empty(backend, [this.size], this.dtype));
    }
    return this.flat;
  }
}

/**
 * The host view of a CPU-backend tensor's storage (its elements in storage format), or null when
 * the storage is not host memory.
 */
export function hostView(tensor: Tensor): HostBuffer | null {
  const view = hostArrayOf(tensor, 'ddp');
  return view instanceof Float32Array || view instanceof Uint16Array ? view : null;
}

const decoders = { f16: f16BitsToF32, bf16: bf16BitsToF32 } as const;
const encoders = { f16: f32ToF16Bits, bf16: f32ToBf16Bits } as const;

/** Copy `source` (of `from`) into `target` (of `to`) at `offset`, times `scale`. */
function convertInto(
  from: DType,
  source: HostBuffer,
  to: DType,
  target: HostBuffer,
  offset: number,
  scale: number,
): void {
  const n = source.length;
  if (from === to && scale === 1) {
    target.set(source, offset);
    return;
  }
  if (from === 'f32' && to === 'f32') {
    scaleF32(source as Float32Array, target as Float32Array, offset, scale);
    return;
  }
  const read: (i: number) => number =
    from === 'f32'
      ? (i) => source[i]!
      : (
          (decode) => (i: number) =>
            decode(source[i]!)
        )(decoders[from as 'f16' | 'bf16']);
  if (to === 'f32') {
    for (let i = 0; i < n; i++) target[offset + i] = read(i) * scale;
    return;
  }
  const encode = encoders[to as 'f16' | 'bf16'];
  for (let i = 0; i < n; i++) target[offset + i] = encode(read(i) * scale);
}

/**
 * `target[offset + i] = source[i] * scale`: the unpack of every f32 bucket (the average's 1 / world
 * size), a loop of its own so that it compiles for two Float32Arrays. Through the general path's
 * element reader it took 3.4-4.8 ms of the MLP bench's 16-27 ms step (2 M gradients, CPU profile).
 */
function scaleF32(source: Float32Array, target: Float32Array, offset: number, scale: number): void {
  const n = source.length;
  for (let i = 0; i < n; i++) target[offset + i] = source[i]! * scale;
}
