import { describe, expect, it } from 'vitest';
import { ArgumentError, BackendError } from './errors.js';
import { tensorFromHostArray } from './external.js';
import { add } from './ops/index.js';
import { createCpuBackend } from './runtime.js';

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
