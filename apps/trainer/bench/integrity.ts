/**
 * [Note: the integrity bench]
 * Issue 44: at GPT-2 size the default transport once handed a rank another op's data in half the
 * runs (a registered reduce-scatter that took a round of the shm arena on some ranks only:
 * [Note: barrier stamps]), where millisecond steps on small models never showed it. This bench
 * trains GPT-2 small (the rows' flags of bench/gpt2.ts, block 128 and batch 4 a rank as the
 * issue's run, 3 steps) with fsdp and ddp over shm at 2 and 4 ranks, each `--runs` times (5 by
 * default), and over tcp once each, every run its own CLI process with `--log-jsonl`, and holds
 * every logged number to the others:
 * - the loss of every step equal across every run and transport of a strategy and world size (to
 *   1e-6), and the process's exit 0 (a wrong scalar once stopped a run with an agreed SIGINT);
 * - the per-rank fields sane: `tokensPerSecondPerRank` within 4x of each other in a step (a wrong
 *   gather gave 12247 beside 25), `peakDeviceBytesPerRank` and `peakHostBytesPerRank` over 64 MiB
 *   and within 2x of each other (a pid and another rank's peak were read as them).
 * Some 3-6 minutes a run on the 2-core machine, so it is not part of `pnpm bench`:
 * `pnpm --filter @webshard/trainer bench:integrity [--runs N] [--cases fsdp2,ddp4,...]`. Exits 1
 * when any number disagrees, printing which.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const FLAGS = [
  ...['--n-layer', '12', '--n-head', '12', '--n-embd', '768', '--block-size', '128'],
  ...['--batch-size', '4', '--vocab-size', '50304', '--backend', 'cpu', '--steps', '3'],
  ...['--sample-length', '0'],
];
const CLI = fileURLToPath(new URL('../bin/webshard-train.js', import.meta.url));
const MIB = 2 ** 20;

interface LogLine {
  step: number;
  loss: number;
  tokensPerSecondPerRank?: number[];
  peakDeviceBytesPerRank?: number[];
  peakHostBytesPerRank?: number[];
}

interface Run {
  label: string;
  exit: number | null;
  lines: LogLine[];
  seconds: number;
  load: string;
}

function train(strategy: string, world: number, transport: string, label: string): Run {
  const dir = mkdtempSync(join(tmpdir(), 'webshard-integrity-'));
  const log = join(dir, 'run.jsonl');
  const before = loadavg()[0]!.toFixed(1);
  const started = performance.now();
  const args = [CLI, ...FLAGS, '--strategy', strategy, '--world-size', String(world)];
  args.push('--transport', transport, '--log-jsonl', log);
  const child = spawnSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 64 * MIB });
  const seconds = (performance.now() - started) / 1000;
  let lines: LogLine[] = [];
  try {
    lines = readFileSync(log, 'utf8')
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line) as LogLine);
  } catch {
    // No log: the exit code and its output say why.
  }
  if (child.status !== 0) process.stdout.write(`${label}: exit ${child.status}\n${child.stderr}`);
  rmSync(dir, { recursive: true, force: true });
  const load = `${before}-${loadavg()[0]!.toFixed(1)}`;
  return { label, exit: child.status, lines, seconds, load };
}

/** What is wrong with one run's per-rank fields, each a line. */
function insane(run: Run): string[] {
  const problems: string[] = [];
  for (const line of run.lines) {
    const speeds = line.tokensPerSecondPerRank ?? [];
    if (speeds.length > 0 && Math.max(...speeds) > 4 * Math.min(...speeds)) {
      problems.push(`${run.label} step ${line.step}: tokensPerSecondPerRank ${speeds.join(', ')}`);
    }
    for (const field of ['peakDeviceBytesPerRank', 'peakHostBytesPerRank'] as const) {
      const values = line[field] ?? [];
      const low = Math.min(...values);
      if (values.length > 0 && (low < 64 * MIB || Math.max(...values) > 2 * low)) {
        problems.push(`${run.label} step ${line.step}: ${field} ${values.join(', ')}`);
      }
    }
  }
  return problems;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { runs: { type: 'string', default: '5' }, cases: { type: 'string' } },
  });
  const runs = Number(values.runs);
  const all = ['fsdp2', 'ddp2', 'fsdp4', 'ddp4'];
  const cases = values.cases === undefined ? all : values.cases.split(',');
  const problems: string[] = [];
  const rows: string[] = [];
  for (const name of cases) {
    const [, strategy, world] = /^(fsdp|ddp)(\d)$/.exec(name) ?? [];
    if (strategy === undefined) throw new Error(`--cases: ${name} is not one of ${all.join(', ')}`);
    const done: Run[] = [];
    for (let i = 1; i <= runs; i++) {
      done.push(train(strategy, Number(world), 'shm', `${strategy} ${world} shm #${i}`));
    }
    done.push(train(strategy, Number(world), 'tcp', `${strategy} ${world} tcp`));
    const reference = done[0]!;
    for (const run of done) {
      if (run.exit !== 0) problems.push(`${run.label}: exit ${run.exit}`);
      if (run.lines.length !== 3) problems.push(`${run.label}: ${run.lines.length} steps logged`);
      problems.push(...insane(run));
      run.lines.forEach((line, i) => {
        const expected = reference.lines[i]?.loss;
        if (expected === undefined || Math.abs(line.loss - expected) > 1e-6) {
          problems.push(`${run.label} step ${line.step}: loss ${line.loss} against ${expected}`);
        }
      });
      const losses = run.lines.map((line) => line.loss.toFixed(6)).join(' / ');
      rows.push(`| ${run.label} | ${losses} | ${run.seconds.toFixed(0)} s | ${run.load} |`);
      process.stdout.write(`${rows.at(-1)}\n`);
    }
  }
  process.stdout.write(
    `\n| run | loss, steps 1 / 2 / 3 | wall | load |\n| --- | --- | --- | --- |\n${rows.join('\n')}\n`,
  );
  if (problems.length > 0) {
    process.stdout.write(`\n${problems.length} disagreements:\n${problems.join('\n')}\n`);
    process.exitCode = 1;
  } else {
    process.stdout.write('\nevery logged number agrees across runs and transports\n');
  }
}

await main();
