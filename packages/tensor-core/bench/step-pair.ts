/**
 * This tree's tensor-core against another tree's (a worktree of main, say), in one process: the
 * trainer's default GPT (2 layers, 64 wide, 4 heads, batch 16 x 32, AdamW, clip 1) built in each
 * from the same seed, their steps alternating, so both see the same load. Prints the ratio of
 * this tree's step time to the other's (best, 10th percentile, median) and how far apart the two
 * runs' losses are in units in the last place of f32 (0 when the trees compute the same bits).
 * `auto` after the steps gives both the fused matmul (relaxed FMA), as the trainer does where
 * every rank fuses; `webgpu` runs both on the WebGPU backend (the adapter `VK_ICD_FILENAMES`
 * selects) instead. `WEBSHARD_STEP_PAIR_MODEL=gpt2` times GPT-2 124M instead (12 layers, 768 wide,
 * vocabulary 50304, B4 T256; one warm-up step each, some 8 GB for the two models);
 * `WEBSHARD_STEP_PAIR_CAPTURE=1` times both as the trainer runs them, through `CapturedStep`;
 * `WEBSHARD_STEP_PAIR_CAPTURE=this` captures this tree's step only and runs the other's eagerly
 * (against a tree from before `CapturedStep`, as issue 49's WebGPU goal compares). Run: `pnpm
 * --filter @webshard/tensor-core exec tsx --conditions=@webshard/source bench/step-pair.ts
 * /path/to/other/packages/tensor-core/src/index.ts [steps] [off|auto|webgpu]`.
 */
import { loadavg } from 'node:os';
import * as here from '../src/index.js';

type TensorCore = typeof here;

const [baselinePath, stepsArg, fmaArg] = process.argv.slice(2);
if (baselinePath === undefined) {
  console.error('usage: step-pair.ts /path/to/other/packages/tensor-core/src/index.ts [steps]');
  process.exit(2);
}
const baseline = (await import(baselinePath)) as TensorCore;
const STEPS = Number(stepsArg ?? 150);
const GPT2 = process.env.WEBSHARD_STEP_PAIR_MODEL === 'gpt2';
const CAPTURE_MODE = process.env.WEBSHARD_STEP_PAIR_CAPTURE;
const CAPTURE_NOTE = { '1': ', captured', this: ', this tree captured, the other eager' };
const MODEL = `${GPT2 ? 'GPT-2 124M step (B4 T256)' : 'default GPT step'}${CAPTURE_NOTE[CAPTURE_MODE as keyof typeof CAPTURE_NOTE] ?? ''}`;
const BATCH = GPT2 ? 4 : 16;
const BLOCK = GPT2 ? 256 : 32;
const VOCAB = GPT2 ? 50304 : 65;
const LAYERS = GPT2 ? { nLayer: 12, nHead: 12, nEmbd: 768 } : { nLayer: 2, nHead: 4, nEmbd: 64 };
const WARMUP = GPT2 ? 1 : 5;

interface Runner {
  readonly description: string;
  step(inputs: Int32Array, targets: Int32Array): Promise<number>;
}

async function runner(tc: TensorCore, capture: boolean): Promise<Runner> {
  const backend =
    fmaArg === 'webgpu'
      ? await tc.createWebGpuBackend()
      : tc.createCpuBackend({ matmulFma: fmaArg === 'auto' ? 'auto' : 'off' });
  const config = { blockSize: BLOCK, ...LAYERS, dropout: 0, bias: true };
  const model = new tc.GPT(
    { ...config, vocabSize: VOCAB },
    { backend, generator: new tc.RandomGenerator(1) },
  );
  const params = model.parameters();
  const optimizer = new tc.AdamW(params, { lr: 3e-3, betas: [0.9, 0.95], weightDecay: 0.1 });
  const train = async ([x, y]: readonly here.Tensor[]) => {
    const loss = tc.tidy(() => {
      const out = model.call(x!, y!);
      out.logits.free();
      return out.loss!;
    });
    await loss.backward();
    await tc.clipGradNorm(params, 1);
    optimizer.step();
    optimizer.zeroGrad();
    return [loss];
  };
  // The trainer's captured step ([Note: the captured step]): recorded once, then replayed.
  const captured = capture ? new tc.CapturedStep(train) : null;
  return {
    description: backend.description,
    async step(inputs, targets) {
      const shape = [BATCH, BLOCK];
      const x = tc.tensor(inputs, { backend, dtype: 'i32', shape });
      const y = tc.tensor(targets, { backend, dtype: 'i32', shape });
      const [loss] = captured === null ? await train([x, y]) : await captured.run([x, y]);
      const value = await loss!.item();
      if (captured === null) loss!.free();
      for (const t of [x, y]) t.free();
      return value;
    },
  };
}

/** Units in the last place of f32 between two f32 values. */
function ulps(a: number, b: number): number {
  const bits = new Int32Array(new Float32Array([a, b]).buffer);
  const ordered = (i: number) => (bits[i]! < 0 ? -2147483648 - bits[i]! : bits[i]!);
  return Math.abs(ordered(0) - ordered(1));
}

const ours = await runner(here, CAPTURE_MODE === '1' || CAPTURE_MODE === 'this');
const theirs = await runner(baseline, CAPTURE_MODE === '1');
const random = here.mulberry32(7);
const batch = () => {
  const inputs = Int32Array.from({ length: BATCH * BLOCK }, () => Math.floor(random() * VOCAB));
  const targets = Int32Array.from({ length: BATCH * BLOCK }, () => Math.floor(random() * VOCAB));
  return { inputs, targets };
};
const oursMs: number[] = [];
const theirsMs: number[] = [];
let worstUlps = 0;
const loadStart = loadavg()[0]!;
for (let i = 0; i < STEPS + WARMUP; i++) {
  const { inputs, targets } = batch();
  // Alternate which goes first, so neither always follows the other's garbage.
  const order: [Runner, number[]][] =
    i % 2 === 0
      ? [
          [ours, oursMs],
          [theirs, theirsMs],
        ]
      : [
          [theirs, theirsMs],
          [ours, oursMs],
        ];
  const losses = new Map<Runner, number>();
  for (const [r, times] of order) {
    const start = performance.now();
    losses.set(r, await r.step(inputs, targets));
    if (i >= WARMUP) times.push(performance.now() - start);
  }
  worstUlps = Math.max(worstUlps, ulps(losses.get(ours)!, losses.get(theirs)!));
}
const quantile = (xs: number[], q: number) =>
  [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))]!;
const ratio = (q: number) => (quantile(oursMs, q) / quantile(theirsMs, q)).toFixed(3);
console.log(
  `${MODEL}, this tree / the other (${STEPS} steps each, alternating): best ${ratio(0)}; p10 ${ratio(0.1)}; median ${ratio(0.5)}` +
    ` (median ${quantile(oursMs, 0.5).toFixed(2)} ms vs ${quantile(theirsMs, 0.5).toFixed(2)} ms);` +
    ` losses at most ${worstUlps} ulp apart; ${fmaArg === 'webgpu' ? `${ours.description}, ` : ''}load ${loadStart.toFixed(1)} -> ${loadavg()[0]!.toFixed(1)}`,
);
