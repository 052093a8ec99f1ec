import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { existsSync } from 'node:fs';

export {
  type CategoryTotals,
  formatProfile,
  KernelProfile,
  type KernelWork,
  kernelWork,
  PROFILE_CATEGORIES,
  type ProfileCategory,
  type ProfileCeilings,
  profileKernels,
} from './kernel-profile.js';
export {
  findTorchPeer,
  parseBlasInfo,
  probeTorch,
  runTorchScript,
  SYSTEM_TORCH_PYTHON,
  TORCH_VENV_HINT,
  TORCH_VENV_PYTHON,
  type TorchBuild,
  type TorchPeer,
  type TorchPeerUse,
  torchLabel,
  torchPython,
} from './torch-peer.js';
export { copyBandwidthGbPerS, wasmSimdPeakGflops } from './wasm-peak.js';

/** One measured number, as `pnpm bench` records it in `bench-results/<package>.json`. */
export interface BenchRow {
  name: string;
  metric: string;
  value: number;
  unit: string;
  /** The peer measured in the same run, where there is one (tfjs-backend-webgpu, gloo, memcpy...). */
  peer?: string;
  peerValue?: number;
  /**
   * Whether a larger value is the better one. Left out, it follows the unit: times, sizes and counts
   * of operations (`ms`, `MiB`, `ops`...) are better smaller, rates (`GB/s`, `tokens/s`) larger.
   */
  better?: 'higher' | 'lower';
}

/** Units whose smaller values are the better ones. */
const LOWER_IS_BETTER = new Set([
  'ns',
  'us',
  'µs',
  'ms',
  's',
  'B',
  'bytes',
  'KiB',
  'MiB',
  'GiB',
  'KB',
  'MB',
  'GB',
  'ops',
]);

/**
 * How many times better `value` is than the peer's: value / peer where larger is better,
 * peer / value where smaller is, so that above 1 always means ours is better. Undefined without a
 * peer, or where a value is zero.
 */
export function timesBetter(row: BenchRow): number | undefined {
  const { value, peerValue } = row;
  if (peerValue === undefined || peerValue === 0 || value === 0) return undefined;
  const better = row.better ?? (LOWER_IS_BETTER.has(row.unit) ? 'lower' : 'higher');
  return better === 'higher' ? value / peerValue : peerValue / value;
}

export interface TimingOptions {
  /** Untimed runs first (pipeline compiles, buffer pools, JIT). */
  warmup?: number;
  /** Timed runs; the median is reported. */
  iterations?: number;
  /** Stop adding iterations once this many milliseconds were spent timing. */
  maxMs?: number;
}

/** Median wall time of `fn` in milliseconds, after warm-up. */
export async function timeMedian(fn: () => unknown, options: TimingOptions = {}): Promise<number> {
  const { warmup = 2, iterations = 7, maxMs = 30_000 } = options;
  for (let i = 0; i < warmup; i++) await fn();
  const times: number[] = [];
  const start = performance.now();
  for (let i = 0; i < iterations; i++) {
    const t0 = performance.now();
    await fn();
    times.push(performance.now() - t0);
    if (performance.now() - start > maxMs && times.length >= 3) break;
  }
  return median(times);
}

export function median(values: number[]): number {
  if (values.length === 0) throw new RangeError('median of no values');
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The repository root: the nearest folder above `from` with `pnpm-workspace.yaml` (else `from`). */
export function findRepoRoot(from: string): string {
  let dir = resolve(from);
  for (;;) {
    if (existsSync(join(dir, 'pnpm-workspace.yaml'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) return resolve(from);
    dir = parent;
  }
}

function formatNumber(value: number | undefined): string {
  if (value === undefined || Number.isNaN(value)) return '-';
  if (Math.abs(value) >= 100) return value.toFixed(0);
  if (Math.abs(value) >= 1) return value.toFixed(2);
  return value.toPrecision(3);
}

/**
 * A Markdown table of rows, with how many times better than the peer each value is, where a peer
 * was measured (`timesBetter`: above 1 is better, for times as for rates).
 */
export function formatTable(rows: BenchRow[]): string {
  const lines = [
    '| benchmark | metric | value | unit | peer | peer value | ratio (above 1: better) |',
    '| --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const row of rows) {
    const times = timesBetter(row);
    const ratio = times === undefined ? '-' : `${times.toFixed(2)}x`;
    lines.push(
      `| ${row.name} | ${row.metric} | ${formatNumber(row.value)} | ${row.unit} | ${row.peer ?? '-'} | ${formatNumber(row.peerValue)} | ${ratio} |`,
    );
  }
  return lines.join('\n');
}

/**
 * Prints the table and writes `bench-results/<package>.json` at the repository root.
 * `packageName` is the short name (`tensor-core`, `collectives`).
 */
export function writeBenchResults(
  packageName: string,
  rows: BenchRow[],
  cwd = process.cwd(),
): string {
  const dir = join(findRepoRoot(cwd), 'bench-results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${packageName}.json`);
  writeFileSync(file, `${JSON.stringify(rows, null, 2)}\n`);
  console.log(`\n${packageName}\n\n${formatTable(rows)}\n\nwritten to ${file}`);
  return file;
}
