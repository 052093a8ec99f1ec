import { describe, expect, it } from 'vitest';
import type { DType, HostArray } from './dtype.js';
import { BackendError, DTypeError, FreedTensorError, ShapeError } from './errors.js';
import { createCpuBackend } from './runtime.js';
import { keep, tidy } from './scope.js';
import { TensorStorage } from './storage.js';
import { Tensor } from './tensor.js';
import { describeBackends } from './testing/index.js';

describe('Tensor storage and views', () => {
  it('views share storage at an element offset, like a flat parameter', async () => {
    const backend = createCpuBackend();
    const flat = Tensor.empty(backend, [10]).write([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const weight = flat.view([2, 3], 1);
    const bias = flat.view([2], 7);
    expect(Array.from(await weight.read())).toEqual([1, 2, 3, 4, 5, 6]);
    bias.write([70, 80]);
    expect(Array.from(await flat.read())).toEqual([0, 1, 2, 3, 4, 5, 6, 70, 80, 9]);
    expect(weight.offset).toBe(1);
    expect(() => flat.view([4], 7)).toThrow(ShapeError);
  });

  it('frees storage with the last reference and reuses it from the pool', () => {
    const backend = createCpuBackend();
    const a = Tensor.empty(backend, [256]);
    const view = a.view([128], 128);
    expect(backend.memoryStats().allocated).toBe(1024);
    a.free();
    expect(backend.memoryStats().allocated).toBe(1024); // the view still holds it
    view.free();
    expect(backend.memoryStats().allocated).toBe(0);
    Tensor.empty(backend, [200]);
    expect(backend.memoryStats().poolHits).toBe(1);
  });

  it('a freed tensor throws FreedTensorError naming the op and the tensor', async () => {
    const backend = createCpuBackend();
    const t = Tensor.empty(backend, [3]);
    t.name = 'fc1.weight';
    t.free();
    expect(t.isFreed).toBe(true);
    expect(() => t.kernel('matmul')).toThrow(new FreedTensorError('matmul', 'fc1.weight').message);
    await expect(t.read()).rejects.toBeInstanceOf(FreedTensorError);
    t.reallocate().write([1, 2, 3]);
    expect(Array.from(await t.read())).toEqual([1, 2, 3]);
  });

  it('setData points a tensor at other storage of the same shape and dtype', async () => {
    const backend = createCpuBackend();
    const param = Tensor.empty(backend, [2]).write([1, 2]);
    const flat = Tensor.empty(backend, [5]).write([0, 0, 5, 6, 0]);
    param.setData(flat.view([2], 2));
    expect(Array.from(await param.read())).toEqual([5, 6]);
    expect(() => param.setData(Tensor.empty(backend, [3]))).toThrow(ShapeError);
    expect(() => param.setData(Tensor.empty(backend, [2], 'i32'))).toThrow(DTypeError);
  });

  it('data reads as a detached tensor over the same storage, as PyTorch', async () => {
    const backend = createCpuBackend();
    const flat = Tensor.empty(backend, [5]).write([0, 1, 2, 3, 4]);
    const param = flat.view([2], 2);
    param.requiresGrad = true;
    param.name = 'fc.bias';
    const data = param.data;
    expect(data).not.toBe(param);
    expect(data.requiresGrad).toBe(false);
    expect(data.isLeaf).toBe(true);
    expect(data.storage()).toBe(param.storage());
    expect(data.offset).toBe(2);
    expect(data.shape).toEqual([2]);
    data.write([20, 30]);
    expect(Array.from(await param.read())).toEqual([20, 30]);
    // The handle holds its own reference: freeing it leaves the parameter alone.
    const refs = param.storage().refCount;
    data.free();
    expect(param.storage().refCount).toBe(refs - 1);
    param.free();
    expect(() => param.data).toThrow(new FreedTensorError('data', 'fc.bias').message);
  });

  it('data = other swaps storage like setData, with the same typed errors', async () => {
    const backend = createCpuBackend();
    const param = Tensor.empty(backend, [2]).write([1, 2]);
    param.name = 'w';
    param.requiresGrad = true;
    const flat = Tensor.empty(backend, [5]).write([0, 0, 5, 6, 0]);
    const old = param.storage();
    param.data = flat.view([2], 2);
    expect(param.storage()).toBe(flat.storage());
    expect(param.offset).toBe(2);
    expect(old.isReleased).toBe(true);
    expect(param.requiresGrad).toBe(true);
    expect(param.name).toBe('w');
    expect(Array.from(await param.read())).toEqual([5, 6]);
    const shape = () => {
      param.data = Tensor.empty(backend, [3]);
    };
    expect(shape).toThrow(ShapeError);
    expect(shape).toThrow(
      /^\[data\] shape of the new data for Tensor\(w, \[2\], f32, cpu\) differs/,
    );
    expect(() => {
      param.data = Tensor.empty(backend, [2], 'i32');
    }).toThrow(DTypeError);
    expect(() => {
      param.data = Tensor.empty(createCpuBackend(), [2]);
    }).toThrow(BackendError);
    const freed = Tensor.empty(backend, [2]);
    freed.free();
    expect(() => {
      param.data = freed;
    }).toThrow(FreedTensorError);
    // A failed assignment leaves the tensor as it was.
    expect(Array.from(await param.read())).toEqual([5, 6]);
    // A freed tensor (FSDP's resharded parameter) can be given storage again.
    param.free();
    param.data = Tensor.empty(backend, [2]).write([7, 8]);
    expect(Array.from(await param.read())).toEqual([7, 8]);
  });

  it('writes and reads f16, bf16 and i32 in their storage formats', async () => {
    const backend = createCpuBackend();
    const h = Tensor.empty(backend, [3], 'f16').write([1.00146484375, 65520, -0.1]);
    expect(Array.from(await h.readRaw())).toEqual([15362, 31744, 44646]);
    expect(Array.from(await h.read())).toEqual([
      1.001953125,
      Number.POSITIVE_INFINITY,
      -0.0999755859375,
    ]);
    const b = Tensor.empty(backend, [1], 'bf16').write([2051]);
    expect(await b.item()).toBe(2048);
    const i = Tensor.empty(backend, [2], 'i32').write([3.9, -3.9]);
    expect(Array.from(await i.read())).toEqual([3, -3]);
    expect(() => i.write([1])).toThrow(ShapeError);
  });

  it('moves between backends with to()', async () => {
    const a = createCpuBackend();
    const b = createCpuBackend();
    const t = Tensor.empty(a, [2], 'bf16').write([1.5, -2]);
    const u = await t.to(b);
    expect(u.backend).toBe(b);
    expect(Array.from(await u.read())).toEqual([1.5, -2]);
    expect(await t.to(a)).toBe(t);
  });

  it('storage release is idempotent and retain after release is an error', () => {
    const backend = createCpuBackend();
    const storage = TensorStorage.allocate(backend, 16);
    storage.release();
    storage.release();
    expect(storage.isReleased).toBe(true);
    expect(() => storage.retain()).toThrow('[storage] retain of released storage');
  });
});

describe('tidy', () => {
  it('frees the tensors a scope created except its result and kept tensors', () => {
    const backend = createCpuBackend();
    let inner: Tensor | undefined;
    let kept: Tensor | undefined;
    const result = tidy(() => {
      inner = Tensor.empty(backend, [64]);
      kept = keep(Tensor.empty(backend, [64]));
      return { out: Tensor.empty(backend, [64]) };
    });
    expect(inner?.isFreed).toBe(true);
    expect(kept?.isFreed).toBe(false);
    expect(result.out.isFreed).toBe(false);
    expect(backend.memoryStats().allocated).toBe(512);
  });

  it('nested scopes hand their result to the enclosing scope', () => {
    const backend = createCpuBackend();
    let fromInner: Tensor | undefined;
    tidy(() => {
      fromInner = tidy(() => Tensor.empty(backend, [4]));
      expect(fromInner.isFreed).toBe(false);
    });
    expect(fromInner?.isFreed).toBe(true);
  });
});

describeBackends('to() between backends', (ctx) => {
  /** Raw elements of a dtype, bit patterns chosen to catch any conversion on the way. */
  function rawData(dtype: DType): HostArray {
    switch (dtype) {
      case 'f32':
        // Signed zero, a subnormal, a NaN with a payload, infinity, an ordinary value.
        return new Float32Array(
          Uint32Array.from([
            0x80000000, 0x00000001, 0x7fc00123, 0xff800000, 0x3f9e0419, 0x7f7fffff, 5,
          ]).buffer,
        );
      case 'f64':
        return Float64Array.from([-0, 5e-324, Number.NaN, -Infinity, 0.1, 1e308, 3]);
      case 'i32':
        return Int32Array.from([-2147483648, 2147483647, -1, 0, 1, 123456789, 7]);
      default:
        return Uint16Array.from([0x8000, 0x0001, 0x7e01, 0xfc00, 0x3555, 0x7bff, 0x7f80]);
    }
  }

  const bytes = (a: HostArray) => [...new Uint8Array(a.buffer, a.byteOffset, a.byteLength)];

  it('moves every dtype from the CPU and back bit for bit, from views at odd offsets', async () => {
    const cpu = createCpuBackend();
    for (const dtype of [...ctx.floatDTypes, 'i32'] as const) {
      const raw = rawData(dtype);
      const onCpu = Tensor.empty(cpu, [raw.length], dtype).write(raw);
      const there = await onCpu.to(ctx.backend);
      expect(there.backend).toBe(ctx.backend);
      expect(there.dtype).toBe(dtype);
      expect(there.shape).toEqual([raw.length]);
      expect(bytes(await there.readRaw()), `${dtype} cpu -> ${ctx.kind}`).toEqual(bytes(raw));
      const back = await there.to(cpu);
      expect(back.backend).toBe(cpu);
      expect(bytes(await back.readRaw()), `${dtype} ${ctx.kind} -> cpu`).toEqual(bytes(raw));
      // A view at an odd element offset on this backend, and into a view on the CPU.
      const flat = Tensor.empty(ctx.backend, [raw.length + 4], dtype);
      const view = flat.view([raw.length], 3).write(raw);
      const fromView = await view.to(cpu);
      expect(bytes(await fromView.readRaw()), `${dtype} view -> cpu`).toEqual(bytes(raw));
      expect(fromView.offset).toBe(0);
      const cpuFlat = Tensor.empty(cpu, [raw.length + 2], dtype);
      const cpuView = cpuFlat.view([raw.length], 1).write(raw);
      expect(bytes(await (await cpuView.to(ctx.backend)).readRaw())).toEqual(bytes(raw));
    }
    cpu.dispose();
  });
});
