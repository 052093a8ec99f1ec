import { describeMismatch, type StressMismatch } from './check.js';
import type { StressTransport } from './job.js';
import { replayCommand, type StressSettings, stressJob } from './settings.js';
import { runStressWorld } from './worlds.js';

/** One seed on one transport, as a stress run reports it. */
export interface SeedResult {
  readonly ok: boolean;
  readonly transport: StressTransport;
  readonly seed: number;
  /** Every rank's mismatch, first op first. */
  readonly mismatches: StressMismatch[];
  /** What to print: a summary line, or the failure and how to replay it. */
  readonly lines: string[];
  readonly wallMs: number;
}

/** Runs `seed` on `transport` and says what happened. */
export async function runSeed(
  settings: StressSettings,
  transport: StressTransport,
  seed: number,
): Promise<SeedResult> {
  const job = stressJob(settings, transport, seed);
  const { reports, output, wallMs } = await runStressWorld(job);
  const mismatches = reports
    .flatMap((r) => (r?.mismatch ? [r.mismatch] : []))
    .sort((a, b) => a.op - b.op || a.rank - b.rank);
  const lines: string[] = [];
  const seconds = (wallMs / 1000).toFixed(1);
  const missing = reports.flatMap((r, rank) => (r === null ? [rank] : []));
  const errors = reports.flatMap((r) => (r?.error ? [r] : []));
  const ok = mismatches.length === 0 && missing.length === 0 && errors.length === 0;
  const places: Record<string, number> = {};
  let ops = 0;
  let checked = 0;
  let threads = 1;
  for (const r of reports) {
    if (r === null) continue;
    ops += r.ops;
    checked += r.checkedBytes;
    threads = Math.max(threads, r.matmulThreads);
    for (const [k, v] of Object.entries(r.placements)) places[k] = (places[k] ?? 0) + v;
  }
  const segments = reports.map((r) => r?.ballastSegment ?? -1);
  const where = Object.entries(places)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  lines.push(
    `stress ${transport} seed ${seed}: ${ok ? 'ok' : 'FAILED'}, ${job.worldSize} ranks, ` +
      `${settings.ops} ops (${ops} rank-ops, ${(checked / 2 ** 20).toFixed(1)} MiB checked), ` +
      `${seconds} s (slowest rank ${Math.max(...reports.map((r) => r?.elapsedMs ?? 0)) / 1000} s); operands: ${where}` +
      (segments.some((s) => s >= 0) ? `; big buffers in segments ${segments.join(',')}` : '') +
      `; matmul threads ${threads}`,
  );
  for (const m of mismatches) lines.push(`  ${describeMismatch(m, transport)}`);
  if (mismatches.length === 0) {
    for (const r of errors) lines.push(`  rank ${r.rank} failed at op #${r.errorOp}: ${r.error}`);
    for (const rank of missing) lines.push(`  rank ${rank} printed no report`);
    if (missing.length > 0 && output !== '') lines.push(output.split('\n').slice(-40).join('\n'));
  }
  if (!ok) lines.push(`  replay: ${replayCommand(settings, transport, seed)}`);
  return { ok, transport, seed, mismatches, lines, wallMs };
}
