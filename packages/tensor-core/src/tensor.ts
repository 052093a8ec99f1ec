import type { Backend, KernelTensor } from './backend/backend.js';
import { bytesPerElement, type DType, type HostArray } from './dtype.js';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from './dtype-convert.js';
import { ArgumentError, BackendError, DTypeError, FreedTensorError, ShapeError } from './errors.js';
import {
  type BackwardOptions,
  backward,
  registerPostAccumulateGradHook,
  registerTensorHook,
} from './autograd/engine.js';
import type { RemovableHandle } from './autograd/hooks.js';
import type { PostAccumulateGradHook, TensorHook } from './autograd/node.js';
import { moveTensors_ } from './move.js';
import { registerInScope, tensorMarker } from './scope.js';
import { TensorStorage } from './storage.js';
import { bindEmptyTensor, TensorBrand } from './tensor-brand.js';

/** The minimal view of an autograd node a tensor holds; `src/autograd/` owns the real type. */
export interface GradNodeLike {
  readonly name: string;
}

export function shapeSize(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

export function checkShape(op: string, shape: readonly number[]): void {
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) {
      throw new ShapeError(op, [shape], `dimension ${d} is not a non-negative integer`);
    }
  }
}

let nextTensorId = 1;

/**
 * An n-dimensional array: contiguous row-major elements at `offset` in a `TensorStorage`.
 *
 * [Note: tensor storage and views]
 * A tensor does not own memory; it holds one reference to a `TensorStorage`. `view` makes another tensor
 * over the same storage at another offset, which is how FSDP's flat parameter hands out each
 * parameter. `free()` drops the reference and marks the tensor freed: any later use throws
 * `FreedTensorError` naming the tensor. `reallocate()` gives a freed (or live) tensor fresh storage
 * of its size, and `setData(other)` (or `t.data = other`, as in PyTorch) points it at another
 * tensor's storage of the same shape (FSDP pointing a parameter at its view of the gathered flat
 * buffer; its shard is a separate 1-D tensor). Autograd
 * reads a parameter's storage at the moment backward needs it, so swapping storage under a graph
 * is allowed.
 */
export class Tensor extends TensorBrand {
  static {
    // See [Note: modules below the tensor].
    bindEmptyTensor((backend, shape, dtype) => Tensor.empty(backend, shape, dtype));
  }

  readonly [tensorMarker] = true;
  readonly id = nextTensorId++;
  readonly shape: readonly number[];
  readonly dtype: DType;
  readonly size: number;
  /** A name for error messages (modules set their parameters' names). */
  name: string | undefined;
  /** Whether autograd tracks operations on this tensor. */
  requiresGrad = false;
  /** The accumulated gradient of a leaf tensor. */
  grad: Tensor | null = null;
  /** The node that produced this tensor, for non-leaf tensors under autograd. */
  gradFn: GradNodeLike | null = null;

  private storageRef: TensorStorage | null;
  private storageOffset: number;
  private backendRef: Backend;

  constructor(storage: TensorStorage, offset: number, shape: readonly number[], dtype: DType) {
    super();
    this.backendRef = storage.backend;
    this.storageRef = storage;
    this.storageOffset = offset;
    this.shape = Object.freeze([...shape]);
    this.dtype = dtype;
    this.size = shapeSize(shape);
    const end = (offset + this.size) * bytesPerElement(dtype);
    if (offset < 0 || end > storage.raw.byteSize) {
      throw new ShapeError(
        'tensor',
        [shape],
        `offset ${offset} and ${this.size} ${dtype} elements do not fit in storage of ${storage.raw.byteSize} bytes`,
      );
    }
    registerInScope(this);
  }

  /** Uninitialized tensor of the given shape on `backend`. */
  static empty(backend: Backend, shape: readonly number[], dtype: DType = 'f32'): Tensor {
    checkShape('empty', shape);
    const storage = TensorStorage.allocate(backend, shapeSize(shape) * bytesPerElement(dtype));
    return new Tensor(storage, 0, shape, dtype);
  }

  /** The backend the tensor's storage is on; changes only with `moveTo_` / `moveTensors_`. */
  get backend(): Backend {
    return this.backendRef;
  }

  get rank(): number {
    return this.shape.length;
  }

  get isFreed(): boolean {
    return this.storageRef === null;
  }

  get isLeaf(): boolean {
    return this.gradFn === null;
  }

  /** The storage; throws `FreedTensorError` (naming `op`) when freed. */
  storage(op = 'storage'): TensorStorage {
    if (this.storageRef === null) throw new FreedTensorError(op, this.name);
    return this.storageRef;
  }

  get offset(): number {
    return this.storageOffset;
  }

  /** The operand a kernel receives. Throws `FreedTensorError` naming `op` if freed. */
  kernel(op: string): KernelTensor {
    return {
      storage: this.storage(op).raw,
      offset: this.storageOffset,
      dtype: this.dtype,
      shape: this.shape,
    };
  }

  /** Drop this tensor's storage reference. Idempotent. */
  free(): void {
    this.storageRef?.release();
    this.storageRef = null;
  }

  /** Give the tensor fresh, uninitialized storage of its own size (after `free()`, or to detach it). */
  reallocate(): this {
    this.storageRef?.release();
    this.storageRef = TensorStorage.allocate(this.backend, this.size * bytesPerElement(this.dtype));
    this.storageOffset = 0;
    return this;
  }

  /**
   * Point this tensor at `source`'s storage (same shape, dtype and backend), like PyTorch's
   * `param.data = other`. The tensor keeps its identity, name, grad and hooks. Same as the `data`
   * setter.
   */
  setData(source: Tensor): this {
    return this.swapStorage('setData', source);
  }

  /**
   * PyTorch's `param.data`. Reading it gives a new tensor over this tensor's storage that does not
   * require grad and has no autograd history (like `detach()`; it holds one storage reference:
   * free it, or read it inside `tidy`). Assigning it is `setData`: the tensor keeps its identity,
   * name, grad and hooks and from then on uses the assigned tensor's storage, also in a backward
   * already recorded (see [Note: saved tensors] in `autograd/node.ts`). Throws `ShapeError`,
   * `DTypeError` or `BackendError` when the new data does not match, `FreedTensorError` when it
   * (or, when read, this tensor) is freed.
   */
  get data(): Tensor {
    const storage = this.storage('data').retain();
    try {
      return new Tensor(storage, this.storageOffset, this.shape, this.dtype);
    } catch (error) {
      storage.release();
      throw error;
    }
  }

  set data(source: Tensor) {
    this.swapStorage('data', source);
  }

  private swapStorage(op: string, source: Tensor): this {
    if (source.dtype !== this.dtype) {
      throw new DTypeError(
        op,
        [this.dtype, source.dtype],
        `dtype of the new data for ${this} differs`,
      );
    }
    if (
      source.size !== this.size ||
      source.rank !== this.rank ||
      source.shape.some((d, i) => d !== this.shape[i])
    ) {
      throw new ShapeError(
        op,
        [this.shape, source.shape],
        `shape of the new data for ${this} differs`,
      );
    }
    if (source.backend !== this.backend) {
      throw new BackendError(
        op,
        `new data is on ${source.backend.kind}, ${this} on ${this.backend.kind}`,
      );
    }
    const storage = source.storage(op).retain();
    this.storageRef?.release();
    this.storageRef = storage;
    this.storageOffset = source.offset;
    return this;
  }

  /** A tensor of `shape` over this tensor's storage, starting `offset` elements into this tensor. */
  view(shape: readonly number[], offset = 0): Tensor {
    checkShape('view', shape);
    const size = shapeSize(shape);
    if (offset < 0 || offset + size > this.size) {
      throw new ShapeError(
        'view',
        [this.shape, shape],
        `a view of ${size} elements at offset ${offset} does not fit in ${this.size}`,
      );
    }
    const storage = this.storage('view').retain();
    try {
      return new Tensor(storage, this.storageOffset + offset, shape, this.dtype);
    } catch (error) {
      storage.release();
      throw error;
    }
  }

  /** Another handle on the same storage and shape, without autograd history. */
  detach(): Tensor {
    return this.view(this.shape, 0);
  }

  /** Elements on the host. f32, f16 and bf16 decode to Float32Array; i32 to Int32Array; f64 to Float64Array. */
  async read(): Promise<Float32Array | Int32Array | Float64Array> {
    const raw = await this.readRaw();
    if (this.dtype === 'f16' || this.dtype === 'bf16') {
      const decode = this.dtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
      const out = new Float32Array(raw.length);
      for (let i = 0; i < raw.length; i++) out[i] = decode(raw[i]!);
      return out;
    }
    return raw as Float32Array | Int32Array | Float64Array;
  }

  /** Elements on the host in storage format (f16 and bf16 as raw bits in a Uint16Array). */
  readRaw(): Promise<HostArray> {
    return this.backend.read(this.kernel('read'));
  }

  /** The single element of a one-element tensor. */
  async item(): Promise<number> {
    if (this.size !== 1)
      throw new ShapeError('item', [this.shape], 'item() needs exactly one element');
    return (await this.read())[0]!;
  }

  /**
   * Overwrite the elements from host data: numbers (converted to the dtype) or a host array in
   * storage format (`HostArray`).
   */
  write(data: ArrayLike<number>): this {
    if (data.length !== this.size) {
      throw new ShapeError(
        'write',
        [this.shape, [data.length]],
        `expected ${this.size} elements, got ${data.length}`,
      );
    }
    this.backend.write(this.kernel('write'), toHostArray(data, this.dtype));
    return this;
  }

  /** A copy on another backend (or this tensor itself when already there); `moveTo_` moves in place. */
  async to(backend: Backend): Promise<Tensor> {
    if (backend === this.backend) return this;
    const raw = await this.readRaw();
    const out = Tensor.empty(backend, this.shape, this.dtype);
    backend.write(out.kernel('to'), raw);
    return out;
  }

  /**
   * Move this tensor's storage to `backend` in place: the tensor object (identity, name,
   * `requiresGrad`, hooks, its place in a recorded graph and in an optimizer's state) stays, its
   * elements are now on `backend`. `.grad` moves along. Throws `SharedStorageError` when a view
   * shares the storage (move them together with `moveTensors_`). See [Note: moving tensors
   * between backends in place] in `move.ts`.
   */
  async moveTo_(backend: Backend): Promise<this> {
    await moveTensors_([this], backend);
    return this;
  }

  /**
   * Point this tensor at `storage` (on its backend) at element `offset`, releasing its old storage
   * reference and taking over the caller's reference. Internal to the in-place move (`move.ts`).
   * @internal
   */
  rebindStorage(storage: TensorStorage, offset: number): void {
    this.storageRef?.release();
    this.storageRef = storage;
    this.storageOffset = offset;
    this.backendRef = storage.backend;
  }

  /**
   * Backpropagate from this tensor (see `backward` in `autograd/engine.ts`): `gradient` may be
   * omitted for a one-element tensor. Resolves after every hook and queued callback has run.
   */
  backward(gradient?: Tensor | null, options?: BackwardOptions): Promise<void> {
    return backward(this, gradient ?? null, options);
  }

  /** Hook on this tensor's gradient; may return a replacement, may be async. */
  registerHook(hook: TensorHook): RemovableHandle {
    return registerTensorHook(this, hook);
  }

  /** Hook that runs after this leaf's gradient was accumulated into `.grad`; may be async. */
  registerPostAccumulateGradHook(hook: PostAccumulateGradHook): RemovableHandle {
    return registerPostAccumulateGradHook(this, hook);
  }

  override toString(): string {
    return `Tensor(${this.name ? `${this.name}, ` : ''}[${this.shape.join(', ')}], ${this.dtype}, ${this.backend.kind}${this.isFreed ? ', freed' : ''})`;
  }
}

/** Numbers in a dtype's host storage format. Host arrays already of that format pass through. */
export function toHostArray(data: ArrayLike<number>, dtype: DType): HostArray {
  switch (dtype) {
    case 'f32':
      return data instanceof Float32Array ? data : Float32Array.from(data);
    case 'f64':
      return data instanceof Float64Array ? data : Float64Array.from(data);
    case 'i32': {
      if (data instanceof Int32Array) return data;
      const out = new Int32Array(data.length);
      for (let i = 0; i < data.length; i++) {
        const v = data[i]!;
        if (!Number.isFinite(v))
          throw new ArgumentError('write', `element ${i} (${v}) is not a finite integer for i32`);
        out[i] = Math.trunc(v);
      }
      return out;
    }
    default: {
      if (data instanceof Uint16Array) return data;
      const encode = dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
      const out = new Uint16Array(data.length);
      for (let i = 0; i < data.length; i++) out[i] = encode(data[i]!);
      return out;
    }
  }
}
