import {
  AdamW,
  type Backend,
  clipGradNorm,
  createCpuBackend,
  Linear,
  mseLoss,
  mulberry32,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { clipShardedGradNorm } from './grad-norm.js';
import { onLocalRanks } from './test-support/ranks.js';

/*
 * [Note: FSDP's arithmetic at GPT-2 width]
 * Issue 50 found GPT-2 124M under FSDP on 2 ranks ending `transformer.h.3.attn.c_proj.bias` 1.1e-4
 * of its update from float64 where PyPI's PyTorch float32 was 7.0e-6, and asked what FSDP adds.
 * What FSDP puts between the ranks' gradients and the optimizer is the reduce-scatter (pre-divide,
 * sum, post-divide: at 2 ranks one f32 rounding of the sum, the divides by 2 and 1 exact) and the
 * sharded norm that the clip divides by (each rank's partial sum of squares, combined in double;
 * an error there moves every tensor, since AdamW mixes the steps' gradients in the ratio of their
 * clip factors). This test holds both to one process at GPT-2 small's width: an attention `c_proj`
 * (768 x 768 and its bias, nanoGPT's init) on 4 x 128 rows, 3 AdamW steps with the clip active,
 * one process and FSDP on 2 ranks (2 sequences each), against float64 in plain doubles:
 * - each rank's reduced shard gradient within 2 ulps (of the tensor's largest) of one process's,
 *   and no further from float64 than twice one process's error;
 * - every step's norm within 2e-7 of float64's, for both;
 * - each tensor's distance from float64 relative to its update within 3x of one process's.
 * Measured: the weight's gradient bit for bit, the bias's 1 ulp, norms within 7e-8. A reduction
 * that rounds more than the sum does fails the first check: the reduce-scatter's input rounded
 * through f16 is 3062 ulps from one process (a pre-divide of 3, two more roundings, stays at 1).
 * On the whole model FSDP ends every tensor where one process does (the trainer's README, "GPT-2
 * small against float64": that bias 8.0e-5 and 7.9e-5, one element whose gradients are 100x
 * smaller than its tensor's).
 */

const WIDTH = 768;
const BATCH = 4;
const BLOCK = 128;
const ROWS = BATCH * BLOCK;
const STEPS = 3;
const LR = 6e-4;
const BETAS: [number, number] = [0.9, 0.95];
const EPS = 1e-8;
const DECAY = 0.1;
/** Below the norm (about 0.046 here), as clip 1 is below GPT-2's (11.7, 2.7, 1.5): the clip acts on every step. */
const CLIP = 0.025;

/** Standard normals from mulberry32 (Box-Muller), rounded to f32, times `std`. */
function normals(count: number, seed: number, std: number): Float32Array {
  const next = mulberry32(seed);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i += 2) {
    const r = Math.sqrt(-2 * Math.log(1 - next()));
    const t = 2 * Math.PI * next();
    out[i] = std * r * Math.cos(t);
    if (i + 1 < count) out[i + 1] = std * r * Math.sin(t);
  }
  return out;
}

/** The problem: inputs, per-step targets and the initial weight (nanoGPT's c_proj init). */
const x = normals(ROWS * WIDTH, 1, 1);
const targets = Array.from({ length: STEPS }, (_, s) => normals(ROWS * WIDTH, 10 + s, 0.5));
const weight0 = normals(WIDTH * WIDTH, 2, 0.02 / Math.sqrt(2 * 12));

interface Run {
  weight: Float64Array;
  bias: Float64Array;
  norms: number[];
  /** The gradients (before the clip) of the first step, weight then bias. */
  firstGrads: [Float64Array, Float64Array];
}

/** The same steps in doubles: loss = mean((x W^T + b - t)^2), clip, AdamW (decay on W only). */
function trainFloat64(): Run {
  const w = Float64Array.from(weight0);
  const b = new Float64Array(WIDTH);
  const state = [w, b].map((p) => ({
    m: new Float64Array(p.length),
    v: new Float64Array(p.length),
  }));
  const norms: number[] = [];
  let firstGrads: [Float64Array, Float64Array] | null = null;
  const dy = new Float64Array(ROWS * WIDTH);
  for (let step = 0; step < STEPS; step++) {
    const t = targets[step]!;
    for (let r = 0; r < ROWS; r++) {
      for (let o = 0; o < WIDTH; o++) {
        let y = b[o]!;
        const xr = r * WIDTH;
        const wo = o * WIDTH;
        for (let i = 0; i < WIDTH; i++) y += x[xr + i]! * w[wo + i]!;
        dy[r * WIDTH + o] = (2 * (y - t[r * WIDTH + o]!)) / (ROWS * WIDTH);
      }
    }
    const gw = new Float64Array(WIDTH * WIDTH);
    const gb = new Float64Array(WIDTH);
    for (let r = 0; r < ROWS; r++) {
      for (let o = 0; o < WIDTH; o++) {
        const d = dy[r * WIDTH + o]!;
        gb[o] = gb[o]! + d;
        const wo = o * WIDTH;
        const xr = r * WIDTH;
        for (let i = 0; i < WIDTH; i++) gw[wo + i] = gw[wo + i]! + d * x[xr + i]!;
      }
    }
    if (step === 0) firstGrads = [Float64Array.from(gw), Float64Array.from(gb)];
    let squares = 0;
    for (const g of [gw, gb]) for (const v of g) squares += v * v;
    const norm = Math.sqrt(squares);
    norms.push(norm);
    const coef = Math.min(1, CLIP / (norm + 1e-6));
    const bias1 = 1 - BETAS[0] ** (step + 1);
    const bias2 = Math.sqrt(1 - BETAS[1] ** (step + 1));
    [w, b].forEach((p, k) => {
      const g = k === 0 ? gw : gb;
      const { m, v } = state[k]!;
      for (let i = 0; i < p.length; i++) {
        const gi = g[i]! * coef;
        if (k === 0) p[i] = p[i]! * (1 - LR * DECAY);
        m[i] = BETAS[0] * m[i]! + (1 - BETAS[0]) * gi;
        v[i] = BETAS[1] * v[i]! + (1 - BETAS[1]) * gi * gi;
        p[i] = p[i]! - ((LR / bias1) * m[i]!) / (Math.sqrt(v[i]!) / bias2 + EPS);
      }
    });
  }
  return { weight: w, bias: b, norms, firstGrads: firstGrads! };
}

/** A c_proj of tensor-core's on `backend` with the shared initial weight and a zero bias. */
function cProj(backend: Backend): Linear {
  const layer = new Linear(WIDTH, WIDTH, { backend });
  layer.weight.write(weight0);
  layer.bias!.write(new Float32Array(WIDTH));
  return layer;
}

/** Rows [from, to) of the batch (sequences of 128) as [n, 128, 768], and the step's targets. */
function batchRows(backend: Backend, step: number, from: number, to: number) {
  const shape = [to - from, BLOCK, WIDTH];
  const span = (a: Float32Array) => a.slice(from * BLOCK * WIDTH, to * BLOCK * WIDTH);
  return [
    tensor(span(x), { backend, shape }),
    tensor(span(targets[step]!), { backend, shape }),
  ] as const;
}

async function read64(t: Tensor): Promise<Float64Array> {
  return Float64Array.from((await t.read()) as Float32Array);
}

/** One process in f32: the trainer's step (mean loss, backward, clipGradNorm, AdamW). */
async function trainSingle(): Promise<Run> {
  const backend = createCpuBackend();
  const layer = cProj(backend);
  const optimizer = new AdamW(
    [
      { params: [layer.weight], weightDecay: DECAY },
      { params: [layer.bias!], weightDecay: 0 },
    ],
    { lr: LR, betas: BETAS, eps: EPS },
  );
  const norms: number[] = [];
  let firstGrads: [Float64Array, Float64Array] | null = null;
  for (let step = 0; step < STEPS; step++) {
    const [input, target] = batchRows(backend, step, 0, BATCH);
    const loss = mseLoss(layer.call(input), target);
    await loss.backward();
    if (step === 0)
      firstGrads = [await read64(layer.weight.grad!), await read64(layer.bias!.grad!)];
    norms.push(await clipGradNorm(layer.parameters(), CLIP));
    optimizer.step();
    optimizer.zeroGrad();
    for (const t of [input, target, loss]) t.free();
  }
  return {
    weight: await read64(layer.weight),
    bias: await read64(layer.bias!),
    norms,
    firstGrads: firstGrads!,
  };
}

/**
 * FSDP on 2 local ranks, each parameter sharded on its own as the trainer does, rank r on
 * sequences [2r, 2r + 2); rank 0's result, and each rank's first reduced shard gradients.
 */
async function trainFsdp(): Promise<{ run: Run; shardGrads: Float64Array[][] }> {
  const world = 2;
  const results = await onLocalRanks(world, async (group, backend) => {
    const model = new FullyShardedDataParallel(cProj(backend), {
      group,
      flattenParameters: false,
    });
    const shards = model.flatParameters.map((f) => f.shard);
    const decayed = model.flatParameters.map((f) => f.entries[0]!.shape.length >= 2);
    const optimizer = new AdamW(
      [
        { params: shards.filter((_, i) => decayed[i]), weightDecay: DECAY },
        { params: shards.filter((_, i) => !decayed[i]), weightDecay: 0 },
      ],
      { lr: LR, betas: BETAS, eps: EPS },
    );
    const per = BATCH / world;
    const norms: number[] = [];
    let shardGrads: Float64Array[] = [];
    for (let step = 0; step < STEPS; step++) {
      const [input, target] = batchRows(backend, step, group.rank * per, (group.rank + 1) * per);
      const loss = mseLoss(await model.call(input), target);
      await loss.backward();
      if (step === 0) shardGrads = await Promise.all(shards.map((s) => read64(s.grad!)));
      norms.push(await clipShardedGradNorm(model, CLIP));
      optimizer.step();
      optimizer.zeroGrad();
      for (const t of [input, target, loss]) t.free();
    }
    const full = await model.summonFullParams(async () => {
      const named = new Map(model.namedParameters());
      return {
        weight: await read64(named.get('weight')!),
        bias: await read64(named.get('bias')!),
      };
    });
    const order = model.flatParameters.map((f) => f.entries[0]!.shape.length >= 2);
    const weightShard = shardGrads[order.indexOf(true)]!;
    const biasShard = shardGrads[order.indexOf(false)]!;
    return { ...full, norms, shardGrads: [weightShard, biasShard] };
  });
  const first = results[0]!;
  return {
    run: {
      weight: first.weight,
      bias: first.bias,
      norms: first.norms,
      firstGrads: [new Float64Array(), new Float64Array()],
    },
    shardGrads: results.map((r) => r.shardGrads),
  };
}

/** max |w - w64| / max |w64 - w0|: the distance from float64 relative to the tensor's update. */
function distance(got: Float64Array, exact: Float64Array, initial: ArrayLike<number>): number {
  let error = 0;
  let update = 0;
  for (let i = 0; i < exact.length; i++) {
    error = Math.max(error, Math.abs(got[i]! - exact[i]!));
    update = Math.max(update, Math.abs(exact[i]! - initial[i]!));
  }
  return error / update;
}

describe('FSDP at GPT-2 width (768) against float64: c_proj on 4 x 128 rows, 3 clipped AdamW steps', () => {
  it('adds at most a rounding to the gradient and the norm, and ends within 3x of one process', async () => {
    const exact = trainFloat64();
    const single = await trainSingle();
    const { run: fsdp, shardGrads } = await trainFsdp();
    // The clip is active on every step, so its factor enters every update.
    for (const n of exact.norms) expect(n).toBeGreaterThan(CLIP);

    // Each rank's reduced shard: the two ranks' halves summed, against one process's sum over all
    // four sequences: the same terms, a rounding or two apart, measured in units in the last place
    // of the tensor's largest gradient (a bias sums 512 rows that cancel: its halves are larger
    // than the sum, and round at their own scale).
    const ulp = (v: number) => 2 ** (Math.floor(Math.log2(v)) - 23);
    const apart: number[] = [];
    [0, 1].forEach((k) => {
      const whole = single.firstGrads[k]!;
      const exactGrad = exact.firstGrads[k]!;
      const unit = ulp(whole.reduce((m, v) => Math.max(m, Math.abs(v)), 0));
      let fromSingle = 0;
      let fsdpError = 0;
      let singleError = 0;
      shardGrads.forEach((grads, rank) => {
        const shard = grads[k]!;
        const offset = rank * shard.length;
        for (let i = 0; i < shard.length; i++) {
          fromSingle = Math.max(fromSingle, Math.abs(shard[i]! - whole[offset + i]!));
          fsdpError = Math.max(fsdpError, Math.abs(shard[i]! - exactGrad[offset + i]!));
          singleError = Math.max(
            singleError,
            Math.abs(whole[offset + i]! - exactGrad[offset + i]!),
          );
        }
      });
      apart.push(fromSingle / unit, fsdpError / unit, singleError / unit);
      expect(fromSingle / unit, k ? 'bias' : 'weight').toBeLessThanOrEqual(2);
      expect(fsdpError).toBeLessThanOrEqual(2 * singleError + unit);
    });
    console.log(
      `first gradients, ulps of the largest: weight fsdp-single ${apart[0]}, fsdp-f64 ${apart[1]}, single-f64 ${apart[2]}; bias ${apart[3]}, ${apart[4]}, ${apart[5]}`,
    );

    // The norms: within a few f32 roundings (2e-7) of float64's, for both.
    for (let s = 0; s < STEPS; s++) {
      const exactNorm = exact.norms[s]!;
      expect(Math.abs(single.norms[s]! - exactNorm) / exactNorm).toBeLessThan(2e-7);
      expect(Math.abs(fsdp.norms[s]! - exactNorm) / exactNorm).toBeLessThan(2e-7);
    }

    const initialBias = new Float64Array(WIDTH);
    const rows = [
      [
        'weight',
        distance(single.weight, exact.weight, weight0),
        distance(fsdp.weight, exact.weight, weight0),
      ],
      [
        'bias',
        distance(single.bias, exact.bias, initialBias),
        distance(fsdp.bias, exact.bias, initialBias),
      ],
    ] as const;
    console.log(
      `c_proj at 768, distance from float64 / update: ${rows.map(([n, s, f]) => `${n} single ${s.toExponential(2)}, fsdp ${f.toExponential(2)}`).join('; ')}; norms ${exact.norms.map((n, s) => `${n.toFixed(6)} (single ${((single.norms[s]! - n) / n).toExponential(1)}, fsdp ${((fsdp.norms[s]! - n) / n).toExponential(1)})`).join(', ')}`,
    );
    for (const [, singleDistance, fsdpDistance] of rows) {
      expect(fsdpDistance).toBeLessThanOrEqual(3 * singleDistance);
    }
  }, 60_000);
});
