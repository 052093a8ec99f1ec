import { describe, expect, it } from 'vitest';
import { ArgumentError, BackendError, FreedTensorError, OutOfMemoryError } from './errors.js';
import { hostArrayOf, tensorFromHostArray } from './external.js';
import { add, tensor } from './ops/index.js';
import { createCpuBackend } from './runtime.js';
import { describeBackends } from './testing/index.js';

describe('tensorFromHostArray', () => {
  it('computes in place on the caller’s memory, counted apart from the allocator', async () => {
    const backend = createCpuBackend();
    const memory = new Float32Array(16);
    const view = memory.subarray(4, 10);
    const t = tensorFromHostArray(backend, view, { shape: [2, 3] });
    expect(backend.memoryStats()).toMatchObject({ allocated: 0, externalBytes: 24 });
    t.write([1, 2, 3, 4, 5, 6]);
    expect([...memory.subarray(4, 10)]).toEqual([1, 2, 3, 4, 5, 6]);
    const doubled = add(t, t);
    expect([...(await doubled.read())]).toEqual([2, 4, 6, 8, 10, 12]);
    memory[4] = 100;
    expect((await t.read())[0]).toBe(100);
    t.free();
    expect(backend.memoryStats()).toMatchObject({ externalBytes: 0, peakExternalBytes: 24 });
    expect([...memory.subarray(4, 10)]).toEqual([100, 2, 3, 4, 5, 6]);
  });

  it('tells the owner when the last reference goes', () => {
    const backend = createCpuBackend();
    let released = 0;
    const t = tensorFromHostArray(backend, new Float32Array(4), { onRelease: () => released++ });
    const view = t.view([2], 2);
    t.free();
    expect(released).toBe(0);
    view.free();
    expect(released).toBe(1);
  });

  it('counts against the emulated limit beside the allocator, refusing past it with nothing taken', () => {
    const backend = createCpuBackend({ memoryLimit: 4096 });
    const block = tensor(new Float32Array(512), { backend }); // 2048 bytes in the allocator
    let released = 0;
    const outside = tensorFromHostArray(backend, new Float32Array(256), {
      onRelease: () => released++,
    }); // 1024 bytes outside it: 3072 of 4096
    // Another 1024 + 4 would pass the limit; the error gives the external share.
    expect(() => tensorFromHostArray(backend, new Float32Array(257))).toThrowError(
      new OutOfMemoryError(1028, 2048, 4096, 'cpu', 1024),
    );
    expect(backend.memoryStats()).toMatchObject({ allocated: 2048, externalBytes: 1024 });
    expect(() => tensor(new Float32Array(512), { backend })).toThrow(
      '[allocate] cpu out of memory: requested 2048 bytes with 2048 allocated (and 1024 bytes of external memory) and a limit of 4096',
    );
    outside.free();
    expect(released).toBe(1);
    // Given back, the same bytes fit again, in the allocator or outside it.
    const again = tensorFromHostArray(backend, new Float32Array(512));
    expect(backend.memoryStats()).toMatchObject({ externalBytes: 2048 });
    again.free();
    block.free();
    tensor(new Float32Array(1024), { backend }).free();
  });

  it('takes f16 bits with a dtype and refuses what does not fit, with typed errors', async () => {
    const backend = createCpuBackend();
    const bits = tensorFromHostArray(backend, new Uint16Array([0x3c00, 0x4000]), { dtype: 'f16' });
    expect([...(await bits.read())]).toEqual([1, 2]);
    expect(() => tensorFromHostArray(backend, new Uint16Array(2))).toThrow(ArgumentError);
    expect(() => tensorFromHostArray(backend, new Float32Array(2), { dtype: 'i32' })).toThrow(
      'cannot hold i32 elements',
    );
    expect(() => tensorFromHostArray(backend, new Float32Array(6), { shape: [4] })).toThrow(
      "does not hold the array's 6 elements",
    );
    const fake = { kind: 'webgpu' } as never;
    expect(() => tensorFromHostArray(fake, new Float32Array(2))).toThrow(BackendError);
  });
});

describeBackends('hostArrayOf', (ctx) => {
  it('views a CPU tensor’s elements in place, from a view’s offset, in storage format; null on a device', async () => {
    const t = tensor([1, 2, 3, 4, 5, 6], { backend: ctx.backend });
    const tail = t.view([3], 3);
    const view = hostArrayOf(tail, 'test');
    if (ctx.backend.kind !== 'cpu') {
      expect(view).toBeNull();
      return;
    }
    expect(view).toBeInstanceOf(Float32Array);
    expect([...view!]).toEqual([4, 5, 6]);
    view![0] = 40;
    expect([...(await t.read())]).toEqual([1, 2, 3, 40, 5, 6]);
    const half = tensor([1, 2], { backend: ctx.backend, dtype: 'f16' });
    expect([...(hostArrayOf(half, 'test') as Uint16Array)]).toEqual([0x3c00, 0x4000]);
    expect(hostArrayOf(tensor([7], { backend: ctx.backend, dtype: 'i32' }), 'test')).toBeInstanceOf(
      Int32Array,
    );
    expect(hostArrayOf(tensor([7], { backend: ctx.backend, dtype: 'f64' }), 'test')).toBeInstanceOf(
      Float64Array,
    );
  });

  it('sees the memory of a tensor over the caller’s array, and refuses a freed tensor by name', () => {
    const backend = createCpuBackend();
    const memory = new Float32Array(8);
    const t = tensorFromHostArray(backend, memory.subarray(2, 6));
    const view = hostArrayOf(t, 'test')!;
    view[1] = 9;
    expect(memory[3]).toBe(9);
    t.free();
    expect(() => hostArrayOf(t, 'allReduce')).toThrow(FreedTensorError);
    expect(() => hostArrayOf(t, 'allReduce')).toThrow(/allReduce/);
  });
});
