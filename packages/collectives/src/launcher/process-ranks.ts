import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import type { Writable } from 'node:stream';
import { LinePrefixer } from './line-prefixer.js';
import type { StartRank } from './supervise.js';

/** How to start one rank as a child process. */
export interface ProcessRanksOptions {
  script: string;
  args: readonly string[];
  /** Run `script` as an executable instead of with Node. */
  noNode: boolean;
  /** Each rank's whole environment. */
  envOf: (localRank: number, rank: number) => Record<string, string>;
  stdout: Writable;
  stderr: Writable;
}

function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const number = signal === null ? 0 : (constants.signals[signal] ?? 0);
  return 128 + number;
}

function commandFor(options: ProcessRanksOptions): { file: string; argv: string[] } {
  const args = [...options.args];
  if (options.noNode) return { file: options.script, argv: args };
  if (/\.[mc]?ts$/.test(options.script)) {
    return { file: process.execPath, argv: ['--import', 'tsx', options.script, ...args] };
  }
  return { file: process.execPath, argv: [options.script, ...args] };
}

/**
 * Ranks as child processes (`.ts` scripts with `node --import tsx`, others with `node`, or the
 * script itself with `noNode`), each line of their output prefixed with `[rank R]`. Stopping is
 * SIGTERM, killing SIGKILL; a rank killed by a signal exits with 128 + its number.
 */
export function processRanks(options: ProcessRanksOptions): StartRank {
  const { file, argv } = commandFor(options);
  return (localRank, rank, exited) => {
    const child = spawn(file, argv, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: options.envOf(localRank, rank),
    });
    const out = new LinePrefixer(`[rank ${rank}] `, options.stdout);
    const err = new LinePrefixer(`[rank ${rank}] `, options.stderr);
    child.stdout?.on('data', (chunk: Buffer) => out.write(chunk));
    child.stderr?.on('data', (chunk: Buffer) => err.write(chunk));
    child.on('error', (error) => {
      err.write(`failed to start ${file}: ${error.message}\n`);
      exited(127);
    });
    child.on('close', (code, signal) => {
      out.flush();
      err.flush();
      exited(exitCodeOf(code, signal));
    });
    const alive = () => child.exitCode === null && child.signalCode === null;
    return {
      stop: () => {
        if (alive()) child.kill('SIGTERM');
      },
      kill: () => {
        if (alive()) child.kill('SIGKILL');
      },
      signal: (signal) => {
        if (alive()) child.kill(signal);
      },
    };
  };
}
