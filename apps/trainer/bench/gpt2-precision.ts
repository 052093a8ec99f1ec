/**
 * [Note: GPT-2 small against float64]
 * How far the CPU backend's training ends from exact arithmetic at GPT-2 small's width (issue 30):
 * PyTorch (PyPI's wheel) makes GPT-2 124M at block 128 with nanoGPT's init, random GPT-2 token ids
 * and trains 3 AdamW steps (lr 6e-4, clip 1.0, batch 4, the trainer's batch rule) in float32 and
 * in float64; the trainer's CLI trains the same steps from the same `--init` and `--data`; for
 * every tensor, the distance from float64 relative to that tensor's own update
 * (max |w - w64| / max |w64 - w0|) of ours and of PyTorch float32. Ours within a few times PyTorch
 * float32's own distance is the goal; the rows show the worst tensor and the median ratio. Some 3
 * minutes; `pnpm --filter @webshard/trainer bench:gpt2-precision`, skipped without the venv.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findRepoRoot, findTorchPeer, runTorchScript } from '@webshard/bench';

const root = findRepoRoot(fileURLToPath(import.meta.url));
const peer = findTorchPeer(root, 'speed');
if ('skipped' in peer) {
  console.log(`gpt2-precision: skipped: ${peer.skipped}`);
  process.exit(0);
}
const script = fileURLToPath(new URL('./gpt2_precision.py', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'webshard-gpt2-precision-'));
const load = loadavg()[0]!.toFixed(1);
try {
  const reference = runTorchScript<{ losses: { f32: number[]; f64: number[] } }>(
    peer.build,
    script,
    ['prepare', dir],
    { timeoutMs: 900_000 },
  );
  const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
  const log = join(dir, 'ours.jsonl');
  const flags = [
    ...['--data', join(dir, 'tokens.bin'), '--init', join(dir, 'init.safetensors')],
    ...['--vocab-size', '50304', '--block-size', '128', '--n-layer', '12', '--n-head', '12'],
    ...['--n-embd', '768', '--batch-size', '4', '--steps', '3', '--lr', '6e-4'],
    ...['--lr-schedule', 'constant', '--beta1', '0.9', '--beta2', '0.95', '--eps', '1e-8'],
    ...['--weight-decay', '0.1', '--grad-clip', '1', '--backend', 'cpu', '--sample-length', '0'],
    ...['--save', join(dir, 'ours.safetensors'), '--log-jsonl', log],
    ...(process.env.WEBSHARD_MATMUL_FMA === 'off' ? ['--matmul-fma', 'off'] : []),
  ];
  const run = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--conditions=@webshard/source', cli, ...flags],
    { encoding: 'utf8', timeout: 900_000 },
  );
  if (run.status !== 0) throw new Error(`webshard-train exited ${run.status}: ${run.stderr}`);
  const ours = readFileSync(log, 'utf8')
    .trim()
    .split('\n')
    .map((line) => (JSON.parse(line) as { loss: number }).loss);
  const { tensors } = runTorchScript<{
    tensors: { name: string; ours: number; torchF32: number }[];
  }>(peer.build, script, ['compare', dir], { timeoutMs: 300_000 });
  const ratios = tensors.map((t) => ({ ...t, ratio: t.ours / t.torchF32 }));
  ratios.sort((a, b) => b.ratio - a.ratio);
  const median = ratios[ratios.length >> 1]!.ratio;
  const gap = (a: number[]) =>
    Math.max(...a.map((v, i) => Math.abs(v - reference.losses.f64[i]!) / reference.losses.f64[i]!));
  console.log(`gpt2-precision (${peer.label}; load ${load} -> ${loadavg()[0]!.toFixed(1)})`);
  console.log(
    `losses: ours ${ours.map((v) => v.toFixed(6)).join(' ')}; torch f32 ${reference.losses.f32.map((v) => v.toFixed(6)).join(' ')}; f64 ${reference.losses.f64.map((v) => v.toFixed(6)).join(' ')}`,
  );
  console.log(
    `loss relative gap to f64: ours ${gap(ours).toExponential(2)}, torch f32 ${gap(reference.losses.f32).toExponential(2)}`,
  );
  console.log(
    `tensors: ${tensors.length}; distance from f64 relative to the update, ours / torch f32: median ${median.toFixed(2)}x, worst 5:`,
  );
  for (const t of ratios.slice(0, 5)) {
    console.log(
      `  ${t.name}: ours ${t.ours.toExponential(2)}, torch f32 ${t.torchF32.toExponential(2)} (${t.ratio.toFixed(1)}x)`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
