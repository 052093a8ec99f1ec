import { readFile } from 'node:fs/promises';
import { basename, resolve } from 'node:path';
import { writeFileAtomically } from '../io/atomic-write.js';
import { UsageError } from '../errors.js';
import { type ReportRecord, type ReportRun, renderReport } from './html-report.js';
import { readUplotAssets } from './uplot-assets.js';

/** `webshard-report`'s usage. */
export const REPORT_USAGE = `webshard-report: one HTML page of the runs of JSONL logs (webshard-train --log-jsonl), overlaid

usage: webshard-report <run.jsonl> [<run.jsonl> ...] [-o report.html]

  -o, --output <file>   where the page goes (default report.html)
`;

/** The steps of one JSONL log (lines of other events, such as membership, are skipped). */
export async function readLogRun(path: string): Promise<ReportRun> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read ${path}: ${(error as Error).message}`, { option: 'log' });
  }
  const records: ReportRecord[] = [];
  for (const [i, line] of text.split('\n').entries()) {
    if (line.trim() === '') continue;
    let value: Record<string, unknown>;
    try {
      value = JSON.parse(line) as Record<string, unknown>;
    } catch {
      throw new UsageError(`${path}:${i + 1} is not a JSON line`, { option: 'log' });
    }
    if (typeof value.step !== 'number' || typeof value.loss !== 'number') continue;
    records.push({
      step: value.step,
      loss: value.loss,
      tokensPerSecond: Number(value.tokensPerSecond ?? 0),
      peakDeviceBytes: Number(value.peakDeviceBytes ?? 0),
      ...(typeof value.peakHostBytes === 'number' ? { peakHostBytes: value.peakHostBytes } : {}),
      ...numbers('peakDeviceBytesPerRank', value.peakDeviceBytesPerRank),
      ...numbers('tokensPerSecondPerRank', value.tokensPerSecondPerRank),
    });
  }
  if (records.length === 0) {
    throw new UsageError(`${path} has no step lines (a webshard-train --log-jsonl file)`, {
      option: 'log',
    });
  }
  return { name: basename(path), command: null, tokensPerStep: 0, records, evals: [] };
}

/** `{ [key]: value }` when `value` is an array of numbers (a per-rank field of a log line). */
function numbers<K extends string>(key: K, value: unknown): { [k in K]?: number[] } {
  return Array.isArray(value) && value.every((v) => typeof v === 'number')
    ? ({ [key]: value } as { [k in K]: number[] })
    : {};
}

/** Parse, read and write; returns the exit code (2 for bad input, with the reason on stderr). */
export async function reportMain(
  argv: readonly string[],
  io: { stdout(text: string): void; stderr(text: string): void; cwd: string },
): Promise<number> {
  const logs: string[] = [];
  let output = 'report.html';
  try {
    for (let i = 0; i < argv.length; i++) {
      const arg = argv[i]!;
      if (arg === '--') continue;
      if (arg === '-h' || arg === '--help') {
        io.stdout(REPORT_USAGE);
        return 0;
      }
      if (arg === '-o' || arg === '--output') {
        const next = argv[++i];
        if (next === undefined) throw new UsageError(`${arg} needs a file`, { option: arg });
        output = next;
      } else if (arg.startsWith('-')) {
        throw new UsageError(`unknown option ${arg}`, { option: arg });
      } else logs.push(arg);
    }
    if (logs.length === 0) throw new UsageError('no JSONL log given', { option: 'log' });
    const runs = await Promise.all(logs.map((log) => readLogRun(resolve(io.cwd, log))));
    const title =
      runs.length === 1 ? `webshard: ${runs[0]!.name}` : `webshard: ${runs.length} runs`;
    const path = resolve(io.cwd, output);
    await writeFileAtomically(path, renderReport({ title, runs }, await readUplotAssets()));
    io.stdout(`report: ${path}\n`);
    return 0;
  } catch (error) {
    if (!UsageError.isInstance(error)) throw error;
    io.stderr(`webshard-report: ${error.message}\n`);
    return 2;
  }
}
