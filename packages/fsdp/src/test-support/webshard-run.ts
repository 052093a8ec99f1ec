// Starting ranks the way users do, through collectives' `webshard-run` (in a child process, from
// source), and reading the one JSON line each rank prints: the process tests' launcher
// (process-parity, hybrid-nodes, and the progress tests' kernel-ranks.ts).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const collectives = dirname(
  createRequire(import.meta.url).resolve('@webshard/collectives/package.json'),
);
const cli = join(collectives, 'src', 'cli', 'webshard-run.ts');

/**
 * How a `webshard-run` ended: its exit code, its stdout (where the ranks' lines are whole), and
 * stdout and stderr interleaved (for a failure's message).
 */
export interface LaunchOutcome {
  readonly code: number | null;
  readonly stdout: string;
  readonly output: string;
}

/** `webshard-run ...args` (its flags, the rank script, the script's arguments), to its end. */
export async function webshardRun(args: readonly string[]): Promise<LaunchOutcome> {
  const child = spawn(
    process.execPath,
    ['--conditions=@webshard/source', '--import', 'tsx', cli, ...args],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NODE_OPTIONS: '--conditions=@webshard/source' },
    },
  );
  let stdout = '';
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    output += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, stdout, output };
}

/** Every line of `output` with `marker` (`REPORT`, `RESULT`), its JSON after it, by rank. */
export function rankLines<T extends { rank: number }>(output: string, marker: string): T[] {
  const tag = `${marker} `;
  return output
    .split('\n')
    .filter((line) => line.includes(tag))
    .map((line) => JSON.parse(line.slice(line.indexOf(tag) + tag.length)) as T)
    .sort((a, b) => a.rank - b.rank);
}
