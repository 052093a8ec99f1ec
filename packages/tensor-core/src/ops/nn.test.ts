import { expect, it } from 'vitest';
import { ArgumentError, DTypeError, IndexError, ShapeError } from '../errors.js';
import { catchDeferred, describeBackends, expectClose, toleranceFor } from '../testing/index.js';
import { roundValues, seededValues } from '../testing/reference.js';
import { tensor } from './creation.js';
import {
  crossEntropy,
  embedding,
  indexAdd,
  layerNorm,
  logSoftmax,
  mseLoss,
  scatterAdd,
  softmax,
} from './nn.js';

function rowsOf(values: readonly number[], cols: number): number[][] {
  const rows: number[][] = [];
  for (let i = 0; i < values.length; i += cols) rows.push(values.slice(i, i + cols));
  return rows;
}

function logSumExp(row: readonly number[]): number {
  const m = Math.max(...row);
  return m + Math.log(row.reduce((s, v) => s + Math.exp(v - m), 0));
}

describeBackends('softmax and logSoftmax', (ctx) => {
  it('match float64 references over the last axis on awkward shapes', async () => {
    for (const [rows, cols] of [
      [1, 1],
      [3, 7],
      [5, 33],
      [2, 130],
    ] as const) {
      for (const dtype of ctx.floatDTypes) {
        const data = roundValues(seededValues(rows * cols, cols, -8, 8), dtype);
        const x = tensor(data, { dtype, backend: ctx.backend, shape: [rows, cols] });
        const lse = rowsOf(data, cols).map(logSumExp);
        const expectedLog = data.map((v, i) => v - lse[Math.floor(i / cols)]!);
        expectClose(await softmax(x).read(), expectedLog.map(Math.exp), toleranceFor(dtype));
        expectClose(await logSoftmax(x).read(), expectedLog, {
          ...toleranceFor(dtype),
          atol: dtype === 'bf16' ? 0.08 : dtype === 'f16' ? 0.01 : 1e-5,
        });
      }
    }
  });

  it('takes another axis by transposing around it', async () => {
    const x = tensor(
      [
        [1, 2],
        [3, 5],
        [0, -1],
      ],
      { backend: ctx.backend },
    );
    const y = await softmax(x, 0).read();
    const col0 = [1, 3, 0].map((v) => Math.exp(v - logSumExp([1, 3, 0])));
    const col1 = [2, 5, -1].map((v) => Math.exp(v - logSumExp([2, 5, -1])));
    expectClose(y, [col0[0]!, col1[0]!, col0[1]!, col1[1]!, col0[2]!, col1[2]!]);
  });

  it('is stable for large logits and rows of -inf', async () => {
    const x = tensor([1000, 1001, -Infinity, -Infinity], { backend: ctx.backend, shape: [2, 2] });
    const y = await softmax(x).read();
    expectClose(y.slice(0, 2), [1 / (1 + Math.E), Math.E / (1 + Math.E)]);
  });
});

describeBackends('layerNorm', (ctx) => {
  it('matches a float64 reference with and without weight and bias', async () => {
    for (const [rows, cols] of [
      [1, 1],
      [4, 7],
      [3, 65],
    ] as const) {
      for (const dtype of ctx.floatDTypes) {
        const data = roundValues(seededValues(rows * cols, cols + 1, -3, 3), dtype);
        const w = roundValues(seededValues(cols, 2, 0.5, 1.5), dtype);
        const bias = roundValues(seededValues(cols, 3), dtype);
        const expected = rowsOf(data, cols).flatMap((row) => {
          const mu = row.reduce((s, v) => s + v, 0) / cols;
          const variance = row.reduce((s, v) => s + (v - mu) ** 2, 0) / cols;
          return row.map((v, c) => ((v - mu) / Math.sqrt(variance + 1e-5)) * w[c]! + bias[c]!);
        });
        const x = tensor(data, { dtype, backend: ctx.backend, shape: [rows, cols] });
        const y = layerNorm(x, {
          weight: tensor(w, { dtype, backend: ctx.backend }),
          bias: tensor(bias, { dtype, backend: ctx.backend }),
        });
        const tol =
          dtype === 'f64'
            ? { rtol: 1e-10, atol: 1e-10 }
            : { ...toleranceFor(dtype), atol: dtype === 'f32' ? 1e-5 : 0.05 };
        expectClose(await y.read(), expected, tol);
        const plain = layerNorm(x, { eps: 1e-5 });
        expectClose(
          await plain.read(),
          expected.map((v, i) => (v - bias[i % cols]!) / w[i % cols]!),
          { ...tol, atol: Math.max(tol.atol, dtype === 'f32' ? 1e-4 : tol.atol) },
        );
      }
    }
  });

  it('rejects a weight of the wrong size', () => {
    const x = tensor(seededValues(6, 1), { backend: ctx.backend, shape: [2, 3] });
    const w = tensor([1, 1], { backend: ctx.backend });
    expect(() => layerNorm(x, { weight: w })).toThrow(ShapeError);
    expect(() => layerNorm(x, { weight: w })).toThrow(
      '[layerNorm] weight and bias must be [3] (shapes [2, 3] and [2])',
    );
  });
});

describeBackends('embedding, indexAdd and scatterAdd', (ctx) => {
  it('embedding gathers rows for any index shape', async () => {
    const table = tensor(
      [
        [0, 1],
        [10, 11],
        [20, 21],
      ],
      { backend: ctx.backend },
    );
    const ids = tensor(new Int32Array([2, 0, 2, 1]), { backend: ctx.backend, shape: [2, 2] });
    const y = embedding(table, ids);
    expect(y.shape).toEqual([2, 2, 2]);
    expect([...(await y.read())]).toEqual([20, 21, 0, 1, 20, 21, 10, 11]);
  });

  it('embedding of bf16 rows copies their bits', async () => {
    const table = tensor([0.1, 0.2, 0.3, 0.4], {
      dtype: 'bf16',
      backend: ctx.backend,
      shape: [2, 2],
    });
    const raw = await table.readRaw();
    const y = embedding(table, tensor(new Int32Array([1]), { backend: ctx.backend }));
    expect([...(await y.readRaw())]).toEqual([raw[2], raw[3]]);
  });

  it('indexAdd and scatterAdd accumulate repeated indices', async () => {
    const x = tensor(
      [
        [1, 1],
        [1, 1],
        [1, 1],
      ],
      { backend: ctx.backend },
    );
    const src = tensor(
      [
        [1, 2],
        [3, 4],
        [5, 6],
      ],
      { backend: ctx.backend },
    );
    const ids = tensor(new Int32Array([2, 0, 2]), { backend: ctx.backend });
    expect([...(await indexAdd(x, ids, src).read())]).toEqual([4, 5, 1, 1, 7, 9]);
    const s = scatterAdd(src, ids, 4);
    expect(s.shape).toEqual([4, 2]);
    expect([...(await s.read())]).toEqual([3, 4, 0, 0, 6, 8, 0, 0]);
  });

  it('scatterAdd holds no block beside its result (an embedding gradient: a table of zeros and a few rows)', async () => {
    const { backend } = ctx;
    const [rows, dim] = [4096, 64];
    const srcValues = roundValues(seededValues(6 * dim, 31, -1, 1), 'f32');
    const src = tensor(srcValues, { backend, shape: [6, dim] });
    const ids = tensor(new Int32Array([5, 4095, 0, 5, 300, 4095]), { backend });
    await backend.sync();
    const before = backend.memoryStats().allocated;
    backend.resetPeakMemoryStats();
    const s = scatterAdd(src, ids, rows);
    // Its result alone (1 MiB; a dispatch's parameters on WebGPU besides), not a table of zeros
    // and a copy of it.
    const grew = backend.memoryStats().peakAllocated - before;
    expect(grew).toBeGreaterThanOrEqual(rows * dim * 4);
    expect(grew).toBeLessThan(rows * dim * 4 * 1.5);
    const out = await s.read();
    const row = (r: number) => [...out.slice(r * dim, (r + 1) * dim)];
    const srcRow = (i: number) => srcValues.slice(i * dim, (i + 1) * dim);
    expect(row(5)).toEqual(srcRow(0).map((v, j) => Math.fround(v + srcRow(3)[j]!)));
    expect(row(0)).toEqual(srcRow(2));
    expect(row(1)).toEqual(new Array(dim).fill(0));
    expect(row(4095)).toEqual(srcRow(1).map((v, j) => Math.fround(v + srcRow(5)[j]!)));
    for (const t of [src, ids, s]) t.free();
  });

  it('throws IndexError naming the kernel for out-of-range ids (deferred to sync on WebGPU)', async () => {
    const table = tensor(
      [
        [0, 1],
        [10, 11],
      ],
      { backend: ctx.backend },
    );
    const bad = tensor(new Int32Array([0, 2]), { backend: ctx.backend });
    const gatherError = await catchDeferred(ctx.backend, () => embedding(table, bad));
    expect(gatherError).toBeInstanceOf(IndexError);
    expect((gatherError as Error).message).toMatch(/^\[gather\] index 2 is out of range \[0, 2\)/);
    const neg = tensor(new Int32Array([-1]), { backend: ctx.backend });
    const scatterError = await catchDeferred(ctx.backend, () =>
      scatterAdd(tensor([[1, 1]], { backend: ctx.backend }), neg, 2),
    );
    expect(scatterError).toBeInstanceOf(IndexError);
    expect((scatterError as Error).message).toMatch(
      /^\[scatterAdd\] index -1 is out of range \[0, 2\)/,
    );
    expect(() => embedding(table, tensor([0], { backend: ctx.backend }))).toThrow(DTypeError);
  });
});

describeBackends('crossEntropy and mseLoss', (ctx) => {
  const logitsData = roundValues(seededValues(5 * 7, 77, -4, 4), 'f32');
  const targetsData = [3, 0, -100, 6, 3];
  const perRow = rowsOf(logitsData, 7).map((row, r) =>
    targetsData[r] === -100 ? 0 : logSumExp(row) - row[targetsData[r]!]!,
  );

  it('matches F.cross_entropy for every reduction, with ignoreIndex', async () => {
    const logits = tensor(logitsData, { backend: ctx.backend, shape: [5, 7] });
    const targets = tensor(new Int32Array(targetsData), { backend: ctx.backend });
    const none = crossEntropy(logits, targets, { reduction: 'none' });
    expect(none.shape).toEqual([5]);
    expectClose(await none.read(), perRow);
    const total = perRow.reduce((s, v) => s + v, 0);
    expectClose(await crossEntropy(logits, targets, { reduction: 'sum' }).read(), [total]);
    const meanLoss = crossEntropy(logits, targets);
    expect(meanLoss.shape).toEqual([]);
    expectClose(await meanLoss.read(), [total / 4]);
  });

  it('computes f16 logits into f32 losses', async () => {
    const data = roundValues(logitsData, 'f16');
    const logits = tensor(data, { dtype: 'f16', backend: ctx.backend, shape: [5, 7] });
    const targets = tensor(new Int32Array([1, 2, 3, 4, 5]), { backend: ctx.backend });
    const losses = crossEntropy(logits, targets, { reduction: 'none' });
    expect(losses.dtype).toBe('f32');
    expectClose(
      await losses.read(),
      rowsOf(data, 7).map((row, r) => logSumExp(row) - row[r + 1]!),
    );
  });

  it('throws IndexError for targets out of range and ShapeError for bad shapes', async () => {
    const logits = tensor(logitsData, { backend: ctx.backend, shape: [5, 7] });
    const bad = tensor(new Int32Array([0, 7, 0, 0, 0]), { backend: ctx.backend });
    const error = await catchDeferred(ctx.backend, () => crossEntropy(logits, bad));
    expect(error).toBeInstanceOf(IndexError);
    expect((error as Error).message).toMatch(/^\[crossEntropy\] index 7 is out of range \[0, 7\)/);
    const short = tensor(new Int32Array([0, 1]), { backend: ctx.backend });
    expect(() => crossEntropy(logits, short)).toThrow(
      '[crossEntropy] expected logits [N, C] and targets [N] (shapes [5, 7] and [2])',
    );
    const targets = tensor(new Int32Array([0, 1, 2, 3, 4]), { backend: ctx.backend });
    expect(() => crossEntropy(logits, targets, { reduction: 'avg' as never })).toThrow(
      ArgumentError,
    );
  });

  it('mseLoss matches the mean, sum and elementwise squared error', async () => {
    const a = roundValues(seededValues(11, 1), 'f32');
    const b = roundValues(seededValues(11, 2), 'f32');
    const ta = tensor(a, { backend: ctx.backend });
    const tb = tensor(b, { backend: ctx.backend });
    const sq = a.map((v, i) => (v - b[i]!) ** 2);
    expectClose(await mseLoss(ta, tb, { reduction: 'none' }).read(), sq);
    expectClose(await mseLoss(ta, tb, { reduction: 'sum' }).read(), [
      sq.reduce((s, v) => s + v, 0),
    ]);
    expectClose(await mseLoss(ta, tb).read(), [sq.reduce((s, v) => s + v, 0) / 11]);
    expect(() => mseLoss(ta, tensor([1], { backend: ctx.backend }))).toThrow(
      '[mseLoss] input and target shapes differ (shapes [11] and [1])',
    );
  });
});
