import { afterEach, describe, expect, it } from 'vitest';
import { bf16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../dtype-convert.js';
import { ArgumentError, BackendError, DTypeError, ShapeError } from '../errors.js';
import { RandomGenerator, manualSeed } from '../random/generator.js';
import { philoxNormal, philoxUniform } from '../random/philox.js';
import { createCpuBackend, getDefaultBackend, setDefaultBackend } from '../runtime.js';
import { describeBackends } from '../testing/index.js';
import { full, ones, onesLike, rand, randn, tensor, zeros, zerosLike } from './creation.js';

describeBackends('creation', (ctx) => {
  const b = () => ({ backend: ctx.backend });

  it('tensor infers shapes from nested arrays and takes typed arrays with a shape', async () => {
    const x = tensor(
      [
        [1, 2, 3],
        [4, 5, 6],
      ],
      b(),
    );
    expect(x.shape).toEqual([2, 3]);
    expect(x.dtype).toBe('f32');
    expect([...(await x.read())]).toEqual([1, 2, 3, 4, 5, 6]);
    const i = tensor(new Int32Array([1, 2, 3, 4]), { ...b(), shape: [2, 2] });
    expect(i.dtype).toBe('i32');
    expect(tensor(3, b()).shape).toEqual([]);
    expect(tensor([], b()).shape).toEqual([0]);
    expect(() => tensor([[1, 2], [3]], b())).toThrow(ShapeError);
    expect(() => tensor([1, 2, 3], { ...b(), shape: [2, 2] })).toThrow(
      '[tensor] 3 elements of data do not fill shape [2, 2] (shapes [2, 2])',
    );
  });

  it('zeros, ones, full and *Like fill every dtype', async () => {
    for (const dtype of [...ctx.floatDTypes, 'i32'] as const) {
      expect([...(await zeros([2, 3], { ...b(), dtype }).read())]).toEqual([0, 0, 0, 0, 0, 0]);
      expect([...(await ones([3], { ...b(), dtype }).read())]).toEqual([1, 1, 1]);
      const f = full([2], 2.5, { ...b(), dtype });
      expect([...(await f.read())]).toEqual(dtype === 'i32' ? [2, 2] : [2.5, 2.5]);
      expect(zerosLike(f).dtype).toBe(dtype);
      expect([...(await onesLike(f).read())]).toEqual([1, 1]);
    }
    expect(zeros([0, 4], b()).size).toBe(0);
  });

  it('rand and randn equal the Philox reference for (seed, offset) and advance the generator', async () => {
    const g = new RandomGenerator(1234);
    const u = rand([5, 7], { ...b(), generator: g, low: -1, high: 2 });
    const expectedU = new Float32Array(35);
    philoxUniform(expectedU, 1234, 0, -1, 2);
    expect([...(await u.read())]).toEqual([...expectedU]);
    expect(g.offset).toBe(35);
    const n = randn([13], { ...b(), generator: g, mean: 1, std: 0.5 });
    // Bit-identical on every backend: see [Note: normals on the host].
    const expectedN = new Float32Array(13);
    philoxNormal(expectedN, 1234, 35, 1, 0.5);
    expect([...(await n.read())]).toEqual([...expectedN]);
    expect(g.offset).toBe(48);
  });

  it('randn is bit-identical to the Philox reference in every float dtype, at large counters', async () => {
    const seed = 2 ** 40 + 7;
    const g = new RandomGenerator(seed).setOffset(2 ** 32 - 500);
    for (const dtype of ['f32', 'f16', 'bf16'] as const) {
      const offset = g.offset;
      const n = randn([1001], { ...b(), dtype, generator: g, mean: -0.25, std: 3 });
      const reference = new Float32Array(1001);
      philoxNormal(reference, seed, offset, -0.25, 3);
      const encode = dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
      const raw = [...(await n.readRaw())];
      if (dtype === 'f32') expect(raw).toEqual([...reference]);
      else expect(raw).toEqual([...reference].map(encode));
    }
  });

  it('same seed gives the same values; consecutive draws do not overlap', async () => {
    const a = await rand([64], { ...b(), generator: new RandomGenerator(9) }).read();
    const again = await rand([64], { ...b(), generator: new RandomGenerator(9) }).read();
    expect([...again]).toEqual([...a]);
    const g = new RandomGenerator(9);
    const first = await rand([32], { ...b(), generator: g }).read();
    const second = await rand([32], { ...b(), generator: g }).read();
    expect([...first, ...second]).toEqual([...a]);
    const other = await rand([64], { ...b(), generator: new RandomGenerator(10) }).read();
    expect([...other]).not.toEqual([...a]);
  });

  it('rand in f16 and bf16 stores the rounded f32 values', async () => {
    const h = rand([9], { ...b(), dtype: 'bf16', generator: new RandomGenerator(3) });
    const f = rand([9], { ...b(), generator: new RandomGenerator(3) });
    const fv = await f.read();
    expect([...(await h.read())]).toEqual([...fv].map((v) => bf16BitsToF32(f32ToBf16Bits(v))));
    expect(() => rand([2], { ...b(), dtype: 'i32' })).toThrow(DTypeError);
  });
});

describe('default backend and generator', () => {
  afterEach(() => setDefaultBackend(undefined));

  it('getDefaultBackend throws until one is set', () => {
    setDefaultBackend(undefined);
    expect(() => getDefaultBackend()).toThrow(BackendError);
    expect(() => zeros([1])).toThrow(/^\[getDefaultBackend\] no default backend is set/);
    const cpu = createCpuBackend();
    setDefaultBackend(cpu);
    expect(zeros([2]).backend).toBe(cpu);
  });

  it('manualSeed restarts the default generator', async () => {
    setDefaultBackend(createCpuBackend());
    manualSeed(42);
    const a = await randn([8]).read();
    manualSeed(42);
    expect([...(await randn([8]).read())]).toEqual([...a]);
  });

  it('createCpuBackend validates its memory limit', () => {
    expect(() => createCpuBackend({ memoryLimit: -1 })).toThrow(ArgumentError);
  });
});
