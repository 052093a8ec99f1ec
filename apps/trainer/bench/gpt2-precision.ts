/**
 * [Note: GPT-2 small against float64]
 * How far training ends from exact arithmetic at GPT-2 small's width (issues 30 and 50): PyTorch
 * makes GPT-2 124M at block 128 with nanoGPT's init, random GPT-2 token ids and trains 3 AdamW steps
 * (lr 6e-4, clip 1.0, batch 4, the trainer's batch rule) in float32 and in float64; the trainer's
 * CLI trains the same steps from the same `--init` and `--data` in one process (`single`) and as
 * FSDP on 2 shm ranks (`fsdp`), and PyTorch's own data parallelism trains them in float32 on 2
 * processes over gloo (`torch-ddp`, DistributedDataParallel). For every tensor, the distance from
 * float64 relative to that tensor's own update (max |w - w64| / max |w64 - w0|) of each run and of
 * PyTorch float32 in one process, and without the tensor's one farthest element.
 *
 * What the distance measures (issue 50): AdamW divides each element's gradient by its own running
 * RMS, so an element whose gradients are far smaller than the rest of its tensor's carries an
 * absolute f32 error of the usual size as a large relative one, and the update is relative to the
 * tensor's largest. In `transformer.h.3.attn.c_proj.bias` element 81's raw gradient is 4.0e-5 at
 * step 1 (median 4.4e-3) and -5.4e-7 at step 2 (the smallest of 768): every run's distance there
 * is that element's (PyTorch f32 2.6e-4, its DDP 1.9e-4, ours 7.9e-5 in one process and 8.0e-5
 * under FSDP; the next element is within 1.8e-5 in all), so a ratio against one float32 run is one
 * draw of one element's rounding. The clip's factor multiplies every update's mixture of steps,
 * so an error in the global norm moves every tensor by about as much: Debian's torch 1.13's float32
 * norm is 2.7e-3 off over 38.6 M elements, which put every tensor at least 3.9e-4 of its update off
 * until the script summed the norm in float64 for every torch (`clip_grad_norm` in
 * gpt2_precision.py). FSDP adds nothing measurable: its reduced gradients are one process's within
 * a rounding (`packages/fsdp/src/gpt2-width-precision.test.ts`) and its norms agree to 2e-8.
 * Any torch serves (`findTorchPeer`'s `reference` kind: PyPI's wheel in `.venv-torch`, or Debian's
 * python3-torch); the first line names it and its BLAS (the float32 peer's rounding depends on it).
 * `WEBSHARD_GPT2_PRECISION_RUNS=single,fsdp,torch-ddp` picks runs (all by default; some 10
 * minutes on 2 cores), `WEBSHARD_GPT2_PRECISION_DIR` keeps the files;
 * `pnpm --filter @webshard/trainer bench:gpt2-precision`, skipped without torch.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findRepoRoot, findTorchPeer, runTorchScript } from '@webshard/bench';

const RUNS = ['single', 'fsdp', 'torch-ddp'] as const;
type RunName = (typeof RUNS)[number];

/** One tensor of `compare`: its name, and each run's distance (`<run>Next`: without its farthest element). */
interface Row {
  name: string;
  distances: Record<string, number>;
}

/** Tensors by the ratio of `key`'s distance to `peerOf`'s, the largest first, and the median. */
function worst(table: Row[], key: string, peerOf: (d: Record<string, number>) => number) {
  const rows = table
    .map((t) => ({ name: t.name, d: t.distances, ratio: t.distances[key]! / peerOf(t.distances) }))
    .sort((a, b) => b.ratio - a.ratio);
  return { rows, median: rows[rows.length >> 1]!.ratio };
}

const root = findRepoRoot(fileURLToPath(import.meta.url));
const peer = findTorchPeer(root, 'reference');
if ('skipped' in peer) {
  console.log(`gpt2-precision: skipped: ${peer.skipped}`);
  process.exit(0);
}
const picked = (process.env.WEBSHARD_GPT2_PRECISION_RUNS ?? RUNS.join(','))
  .split(',')
  .filter((r): r is RunName => (RUNS as readonly string[]).includes(r));
if (picked.length === 0) {
  throw new Error(`WEBSHARD_GPT2_PRECISION_RUNS names no run of ${RUNS.join(', ')}`);
}
const script = fileURLToPath(new URL('./gpt2_precision.py', import.meta.url));
// WEBSHARD_GPT2_PRECISION_DIR keeps the weights, logs and init there for a closer look.
const kept = process.env.WEBSHARD_GPT2_PRECISION_DIR;
const dir =
  kept !== undefined && kept !== ''
    ? kept
    : mkdtempSync(join(tmpdir(), 'webshard-gpt2-precision-'));
mkdirSync(dir, { recursive: true });
const loadBefore = loadavg()[0]!.toFixed(1);

/** The trainer's CLI over the prepared data and init, saving `name`.safetensors; its losses. */
function trainOurs(name: string, strategy: string[]): number[] {
  const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
  const log = join(dir, `${name}.jsonl`);
  const flags = [
    ...['--data', join(dir, 'tokens.bin'), '--init', join(dir, 'init.safetensors')],
    ...['--vocab-size', '50304', '--block-size', '128', '--n-layer', '12', '--n-head', '12'],
    ...['--n-embd', '768', '--batch-size', '4', '--steps', '3', '--lr', '6e-4'],
    ...['--lr-schedule', 'constant', '--beta1', '0.9', '--beta2', '0.95', '--eps', '1e-8'],
    ...['--weight-decay', '0.1', '--grad-clip', '1', '--backend', 'cpu', '--sample-length', '0'],
    ...['--save', join(dir, `${name}.safetensors`), '--log-jsonl', log, ...strategy],
    ...(process.env.WEBSHARD_MATMUL_FMA === 'off' ? ['--matmul-fma', 'off'] : []),
  ];
  const run = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--conditions=@webshard/source', cli, ...flags],
    { encoding: 'utf8', timeout: 1_200_000 },
  );
  if (run.status !== 0)
    throw new Error(`webshard-train (${name}) exited ${run.status}: ${run.stderr}`);
  return readFileSync(log, 'utf8')
    .trim()
    .split('\n')
    .map((line) => (JSON.parse(line) as { loss: number }).loss);
}

try {
  const reference = runTorchScript<{ losses: { f32: number[]; f64: number[] } }>(
    peer.build,
    script,
    ['prepare', dir],
    { timeoutMs: 1_800_000 },
  );
  const losses = new Map<string, number[]>([['torch f32', reference.losses.f32]]);
  const saved: string[] = [];
  for (const run of picked) {
    if (run === 'torch-ddp') {
      runTorchScript(peer.build, script, ['gloo', dir, '2'], { timeoutMs: 1_200_000 });
      saved.push('torch-ddp-f32');
      continue;
    }
    const strategy = run === 'fsdp' ? ['--strategy', 'fsdp', '--world-size', '2'] : [];
    losses.set(run, trainOurs(run, strategy));
    saved.push(run);
  }
  const { tensors } = runTorchScript<{ tensors: ({ name: string } & Record<string, number>)[] }>(
    peer.build,
    script,
    ['compare', dir, ...saved],
    { timeoutMs: 600_000 },
  );
  const table: Row[] = tensors.map(({ name, ...distances }) => ({ name, distances }));
  const f64 = reference.losses.f64;
  const gap = (a: number[]) =>
    Math.max(...a.map((v, i) => Math.abs(v - f64[i]!) / f64[i]!)).toExponential(2);
  console.log(
    `gpt2-precision (${peer.label}, ${peer.build.python}; load ${loadBefore} -> ${loadavg()[0]!.toFixed(1)})`,
  );
  console.log(`f64 losses ${f64.map((v) => v.toFixed(6)).join(' ')}`);
  for (const [name, values] of losses) {
    console.log(
      `${name} losses ${values.map((v) => v.toFixed(6)).join(' ')}; largest relative gap to f64 ${gap(values)}`,
    );
  }
  console.log(
    `tensors: ${tensors.length}; distance from f64 relative to the update, each run / PyTorch f32 in one process:`,
  );
  for (const name of saved) {
    const ranked = worst(table, name, (d) => d.torchF32!);
    console.log(`  ${name}: median ${ranked.median.toFixed(2)}x, worst 3:`);
    for (const t of ranked.rows.slice(0, 3)) {
      console.log(
        `    ${t.name}: ${t.d[name]!.toExponential(2)} against ${t.d.torchF32!.toExponential(2)} (${t.ratio.toFixed(1)}x)`,
      );
    }
    const next = worst(table, `${name}Next`, (d) => d.torchF32Next!).rows[0]!;
    console.log(
      `    without each tensor's farthest element: worst ${next.ratio.toFixed(1)}x (${next.name})`,
    );
    if (saved.includes('torch-ddp-f32') && name !== 'torch-ddp-f32') {
      const farther = worst(table, name, (d) => Math.max(d.torchF32!, d['torch-ddp-f32']!));
      const top = farther.rows[0]!;
      console.log(
        `    against the farther of PyTorch's two f32 runs (one process, DDP): median ${farther.median.toFixed(2)}x, worst ${top.ratio.toFixed(1)}x (${top.name})`,
      );
    }
  }
  const bias = table.find((t) => t.name === 'transformer.h.3.attn.c_proj.bias')?.distances;
  if (bias !== undefined) {
    const cells = ['torchF32', ...saved].map(
      (n) =>
        `${n} ${bias[n]!.toExponential(2)} (${bias[`${n}Next`]!.toExponential(2)} without its farthest element)`,
    );
    console.log(`transformer.h.3.attn.c_proj.bias (issue 50's): ${cells.join(', ')}`);
  }
} finally {
  if (dir !== kept) rmSync(dir, { recursive: true, force: true });
}
