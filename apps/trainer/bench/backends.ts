/**
 * Trainer benchmark: one training step of the default `pnpm train` model (forward, backward,
 * clip, AdamW) on the CPU backend and on WebGPU, in the same run, as the median after warm-up,
 * and PyTorch CPU's step on the same model (`bench/torch_step.py` in PyPI's CPU wheel, the venv of
 * `tooling/peers/torch-venv.sh` or `WEBSHARD_TORCH_PYTHON`; skipped with a message where there is
 * none, refused where its torch runs the reference BLAS). Throughput rows, so a ratio above 1
 * means webshard is faster. The CLI's `auto` measures for itself ([Note: the trainer's default
 * backend]).
 * Run: `pnpm --filter @webshard/trainer bench`; `WEBSHARD_PROFILE=1` (or `gpt2`) prints the step
 * profile instead (`bench/step-profile.ts`); `WEBSHARD_BENCH_GPT2=1` adds the GPT-2 124M rows
 * (`bench/gpt2-step.ts`: the single-process step against PyTorch's, some 2 minutes; `bench/gpt2.ts`:
 * single, ddp 2, fsdp 2 through the CLI, some 20 minutes more), `=all` fsdp 4 and offload too.
 * Then the quick DiLoCo case (`bench/diloco-quick.ts`: bytes per token of DiLoCo H = 50 in int8,
 * int4 and topk against DDP, 4 launchers over loopback, 15-50 s on 2 loaded cores); `WEBSHARD_BENCH_DILOCO=0`
 * skips it.
 */
import { availableParallelism, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import {
  type BenchRow,
  findRepoRoot,
  findTorchPeer,
  median,
  runTorchScript,
  type TorchBuild,
  timeMedian,
  writeBenchResults,
} from '@webshard/bench';
import {
  AdamW,
  type Backend,
  createBackend,
  GPT,
  RandomGenerator,
  relaxedFmaSupport,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { capturedTrainStep } from '../src/captured-train-step.js';
import { loadCorpus } from '../src/corpus.js';
import { BatchSampler } from '../src/data/batches.js';
import { CharTokenizer } from '../src/data/char-tokenizer.js';
import { DEFAULT_MODEL } from '../src/train.js';
import { decayGroups, trainStep } from '../src/train-step.js';
import { dilocoQuickRows } from './diloco-quick.js';
import { gpt2Rows } from './gpt2.js';
import { GPT2_STEP_ROW, gpt2StepRows } from './gpt2-step.js';
import { profileSize, runStepProfile } from './step-profile.js';

const BATCH = 16;

/**
 * Counts the time calls spend awaiting the device (`read`, `sync`) on `backend`: patched on its
 * prototype, which a captured step's tape (shadowing the instance's methods while it records)
 * still calls through.
 */
function deviceWaits(backend: Backend): { waited: () => number; restore: () => void } {
  const proto = Object.getPrototypeOf(backend) as Record<string, (...args: unknown[]) => unknown>;
  let waited = 0;
  const originals = (['read', 'sync'] as const).map((name) => [name, proto[name]!] as const);
  for (const [name, original] of originals) {
    proto[name] = async function (this: unknown, ...args: unknown[]) {
      const started = performance.now();
      try {
        return await original.apply(this, args);
      } finally {
        waited += performance.now() - started;
      }
    };
  }
  return {
    waited: () => waited,
    restore: () => {
      for (const [name, original] of originals) proto[name] = original;
    },
  };
}

/**
 * The median step of the default GPT on `backend`: the eager `trainStep`, or with `captured` the
 * same step recorded once and replayed (`capturedTrainStep`; same bits, [Note: the captured step]
 * in tensor-core). `hostMs`: the median of a step's time less what it waited for the device (all
 * of it on the CPU backend, whose kernels run in the call).
 */
async function stepMs(
  backend: Backend,
  text: string,
  captured = false,
): Promise<{ ms: number; hostMs: number }> {
  const tokenizer = CharTokenizer.fromText(text);
  const config = { ...DEFAULT_MODEL, vocabSize: tokenizer.vocabSize };
  const model = new GPT(config, { backend, generator: new RandomGenerator(1) });
  const params = model.parameters();
  const optimizer = new AdamW(decayGroups(model, 0.1), { lr: 3e-3, betas: [0.9, 0.95] });
  const sampler = new BatchSampler(tokenizer.encode(text), BATCH, config.blockSize, 1);
  const computeLoss = ([inputs, targets]: readonly Tensor[]) => {
    const out = model.call(inputs!, targets!);
    out.logits.free();
    return out.loss!;
  };
  const replayed = captured ? capturedTrainStep(params, optimizer, computeLoss, { clip: 1 }) : null;
  const waits = deviceWaits(backend);
  const hostTimes: number[] = [];
  const warmup = 3;
  try {
    const ms = await timeMedian(
      async () => {
        const batch = sampler.next();
        const shape = [BATCH, config.blockSize];
        const inputs = tensor(batch.inputs, { backend, dtype: 'i32', shape });
        const targets = tensor(batch.targets, { backend, dtype: 'i32', shape });
        const [started, waitedBefore] = [performance.now(), waits.waited()];
        if (replayed) await replayed.step([inputs, targets]);
        else await trainStep(params, optimizer, () => computeLoss([inputs, targets]), { clip: 1 });
        hostTimes.push(performance.now() - started - (waits.waited() - waitedBefore));
        inputs.free();
        targets.free();
      },
      { warmup, iterations: 15, maxMs: 30_000 },
    );
    return { ms, hostMs: median(hostTimes.slice(warmup)) };
  } finally {
    waits.restore();
    if (replayed && replayed.captured.status !== 'captured') {
      console.log(`the captured step ran eagerly: ${replayed.captured.refusal}`);
    }
    replayed?.dispose();
  }
}

const threads = availableParallelism();
/** PyTorch's thread counts: as many as cores (its default), and one where that is more. */
const torchThreads = threads > 1 ? [threads, 1] : [1];
/**
 * The PyTorch peer: PyPI's CPU wheel from `tooling/peers/torch-venv.sh` or `WEBSHARD_TORCH_PYTHON`,
 * a reference-BLAS build refused ([Note: honest PyTorch peers] in tooling/bench); null (with the
 * reason printed) where there is none.
 */
function findPeer(): { build: TorchBuild; label: string } | null {
  const peer = findTorchPeer(findRepoRoot(fileURLToPath(import.meta.url)), 'speed');
  if (!('skipped' in peer)) return peer;
  console.log(`skipping the PyTorch row: ${peer.skipped}`);
  return null;
}

/** PyTorch's median step on the same model (`bench/torch_step.py`) on `n` threads. */
function torchStepMs(build: TorchBuild, vocabSize: number, n: number): number {
  const script = fileURLToPath(new URL('./torch_step.py', import.meta.url));
  const { nLayer, nHead, nEmbd, blockSize } = DEFAULT_MODEL;
  const args = [vocabSize, nLayer, nHead, nEmbd, blockSize, BATCH, n].map(String);
  return runTorchScript<{ ms: number }>(build, script, args, { timeoutMs: 300_000 }).ms;
}

const text = await loadCorpus();
const vocabSize = CharTokenizer.fromText(text).vocabSize;
// `WEBSHARD_PROFILE=1` (the default model) or `=gpt2`: the step profile instead of the rows.
const profile = process.env.WEBSHARD_PROFILE;
if (profile !== undefined && profile !== '' && profile !== '0') {
  await runStepProfile(profileSize(profile, vocabSize));
  process.exit(0);
}
// Alternate the backends and PyTorch (cpu, webgpu, torch, cpu, webgpu, torch) and keep each one's
// better median: the machine is shared, and a burst of load should not land on one side only.
// PyTorch runs on as many threads as cores and on one, and its faster is the peer: its OpenMP
// threads spin while they wait, so on a loaded machine its 2 threads suffer most (medians of 7 ms
// and 315 ms a minute apart at a load average of 8, one thread 14-17 ms).
// The matmul the trainer runs in one process: fused where this engine fuses (ranks/job-fma.ts).
const cpuBackend = await createBackend({
  kind: 'cpu',
  matmulFma: relaxedFmaSupport() === 'fused' ? 'auto' : 'off',
});
const gpuBackend = await createBackend({ kind: 'webgpu' });
const peer = findPeer();
const cpuRuns: number[] = [];
const capturedRuns: number[] = [];
const gpuRuns: { ms: number; hostMs: number }[] = [];
const gpuCapturedRuns: { ms: number; hostMs: number }[] = [];
const torchRuns = new Map<number, number[]>(torchThreads.map((n) => [n, []]));
for (let round = 0; round < 2; round++) {
  cpuRuns.push((await stepMs(cpuBackend, text)).ms);
  capturedRuns.push((await stepMs(cpuBackend, text, true)).ms);
  gpuRuns.push(await stepMs(gpuBackend, text));
  gpuCapturedRuns.push(await stepMs(gpuBackend, text, true));
  for (const n of torchThreads)
    if (peer) torchRuns.get(n)!.push(torchStepMs(peer.build, vocabSize, n));
}
const cpu = Math.min(...cpuRuns);
const captured = Math.min(...capturedRuns);
/** The run with the faster step, and its host time. */
const faster = (runs: { ms: number; hostMs: number }[]) =>
  runs.reduce((best, run) => (run.ms < best.ms ? run : best));
const gpuRun = faster(gpuRuns);
const gpuCapturedRun = faster(gpuCapturedRuns);
const gpu = gpuRun.ms;
const list = (runs: number[]) => runs.map((ms) => ms.toFixed(1)).join(', ');
const listGpu = (runs: { ms: number; hostMs: number }[]) =>
  runs.map((r) => `${r.ms.toFixed(1)} (host ${r.hostMs.toFixed(1)})`).join(', ');
console.log(
  `cpu backend step ${list(cpuRuns)} ms, captured ${list(capturedRuns)} ms; webgpu (${gpuBackend.description}) ${listGpu(gpuRuns)} ms, captured ${listGpu(gpuCapturedRuns)} ms; load average ${loadavg()[0]!.toFixed(1)}`,
);
let torch: { label: string; ms: number } | null = null;
if (peer) {
  for (const [n, runs] of torchRuns) {
    const label = `${peer.label}, ${n} thread${n === 1 ? '' : 's'}`;
    console.log(`${label}: ${list(runs)} ms a step`);
    if (torch === null || Math.min(...runs) < torch.ms) torch = { label, ms: Math.min(...runs) };
  }
}
const tokens = BATCH * DEFAULT_MODEL.blockSize;
const rows: BenchRow[] = [
  {
    name: 'train step, default GPT',
    metric: 'captured cpu step throughput',
    value: (tokens * 1000) / captured,
    unit: 'tokens/s',
    peer: 'cpu backend',
    peerValue: (tokens * 1000) / cpu,
  },
  {
    name: 'train step, default GPT',
    metric: 'webgpu step',
    value: gpu,
    unit: 'ms',
    peer: 'cpu backend',
    peerValue: cpu,
  },
  {
    name: 'train step, default GPT',
    metric: 'captured webgpu step',
    value: gpuCapturedRun.ms,
    unit: 'ms',
    peer: 'webgpu',
    peerValue: gpu,
  },
  {
    name: 'train step, default GPT',
    metric: 'captured webgpu step, time not waiting for the device',
    value: gpuCapturedRun.hostMs,
    unit: 'ms',
    peer: 'webgpu',
    peerValue: gpuRun.hostMs,
  },
  {
    name: 'train step, default GPT',
    metric: 'webgpu throughput',
    value: (tokens * 1000) / gpu,
    unit: 'tokens/s',
    peer: 'cpu backend',
    peerValue: (tokens * 1000) / cpu,
  },
];
if (torch) {
  for (const [name, ms] of [
    ['cpu backend', cpu],
    ['cpu backend captured', captured],
    ['webgpu', gpu],
  ] as const) {
    rows.push({
      name: 'train step, default GPT',
      metric: `${name} throughput`,
      value: (tokens * 1000) / ms,
      unit: 'tokens/s',
      peer: torch.label,
      peerValue: (tokens * 1000) / torch.ms,
    });
  }
}
// [Note: the GPT-2 124M bench rows]: minutes each, so only when asked for.
const gpt2 = process.env.WEBSHARD_BENCH_GPT2;
if (gpt2 === '1' || gpt2 === 'all') {
  const only = process.env.WEBSHARD_BENCH_GPT2_CASES?.split(';');
  if (only === undefined || only.some((part) => GPT2_STEP_ROW.includes(part))) {
    rows.push(...(await gpt2StepRows(threads)));
  }
  rows.push(...gpt2Rows(gpt2 === 'all'));
}
if (process.env.WEBSHARD_BENCH_DILOCO !== '0') rows.push(...(await dilocoQuickRows()));
writeBenchResults('trainer', rows);
process.exit(0);
