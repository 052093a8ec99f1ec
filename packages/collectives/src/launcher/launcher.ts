import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { constants } from 'node:os';
import type { Writable } from 'node:stream';
import { ArgumentError } from '@webshard/tensor-core';

/** What `webshard-run` starts: `nprocPerNode` ranks of `script` on this node. */
export interface LaunchOptions {
  /** Ranks on this node. */
  nprocPerNode: number;
  /** Nodes in the job (default 1). */
  nnodes?: number;
  /** This node's index, 0 <= nodeRank < nnodes (default 0). */
  nodeRank?: number;
  /** Rank 0's address (default `127.0.0.1`). */
  masterAddr?: string;
  /** The rendezvous port; default: a free port on one node, 29500 on several. */
  masterPort?: number;
  /** The join token; default `WEBSHARD_TOKEN`, else a random one (one node only). */
  token?: string;
  /** The script and its arguments. */
  script: string;
  args?: readonly string[];
  /**
   * Run `script` as an executable instead of with Node. By default `.ts`/`.mts`/`.cts` scripts run
   * with `node --import tsx` and anything else with `node`.
   */
  noNode?: boolean;
  /** After a failure or a signal, how long ranks get to exit after SIGTERM before SIGKILL (ms). */
  graceMs?: number;
  /** Extra environment for the ranks (on top of this process's). */
  env?: Record<string, string | undefined>;
  /** Where the prefixed output goes (default this process's stdout and stderr). */
  stdout?: Writable;
  stderr?: Writable;
  /** Forward SIGINT, SIGTERM and SIGHUP to the ranks (default true). */
  forwardSignals?: boolean;
}

/** How a launch ended. */
export interface LaunchResult {
  /** 0 when every rank succeeded; else the first failed rank's code (128 + signal if killed). */
  exitCode: number;
  /** The first rank that failed, if one did. */
  failedRank?: number;
  /** Each rank's exit code, by local rank (128 + signal number when killed by a signal). */
  rankExitCodes: number[];
}

type LaunchState =
  | { kind: 'running' }
  | { kind: 'tearingDown'; exitCode: number; failedRank?: number; killTimer: NodeJS.Timeout };

function exitCodeOf(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const number = signal === null ? 0 : (constants.signals[signal] ?? 0);
  return 128 + number;
}

/** A free TCP port on 127.0.0.1 (the OS picks; released before it is returned). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Prefixes every complete line written through it with `prefix`; a trailing partial line is held
 * until its newline comes or `flush()` is called.
 */
export class LinePrefixer {
  private pending = '';
  constructor(
    private readonly prefix: string,
    private readonly out: Writable,
  ) {}

  write(chunk: Buffer | string): void {
    const text = this.pending + chunk.toString();
    const lines = text.split('\n');
    this.pending = lines.pop() ?? '';
    if (lines.length > 0) this.out.write(lines.map((line) => `${this.prefix}${line}\n`).join(''));
  }

  flush(): void {
    if (this.pending !== '') this.out.write(`${this.prefix}${this.pending}\n`);
    this.pending = '';
  }
}

function commandFor(options: LaunchOptions): { file: string; argv: string[] } {
  const args = [...(options.args ?? [])];
  if (options.noNode) return { file: options.script, argv: args };
  if (/\.[mc]?ts$/.test(options.script)) {
    return { file: process.execPath, argv: ['--import', 'tsx', options.script, ...args] };
  }
  return { file: process.execPath, argv: [options.script, ...args] };
}

function validate(options: LaunchOptions): void {
  const positive = (name: string, value: number) => {
    if (!Number.isSafeInteger(value) || value < 1) {
      throw new ArgumentError('webshard-run', `${name} must be a positive integer, got ${value}`);
    }
  };
  positive('--nproc-per-node', options.nprocPerNode);
  positive('--nnodes', options.nnodes ?? 1);
  const nodeRank = options.nodeRank ?? 0;
  if (!Number.isSafeInteger(nodeRank) || nodeRank < 0 || nodeRank >= (options.nnodes ?? 1)) {
    throw new ArgumentError(
      'webshard-run',
      `--node-rank must be in [0, ${options.nnodes ?? 1}), got ${nodeRank}`,
    );
  }
  if (options.script === '') throw new ArgumentError('webshard-run', 'no script given');
}

/**
 * Starts `nprocPerNode` ranks of a script as child processes with torchrun's environment
 * (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `MASTER_ADDR`,
 * `MASTER_PORT`) plus `WEBSHARD_TOKEN`, prefixes each output line with `[rank R]`, forwards
 * signals, and when one rank fails sends SIGTERM to the others (SIGKILL after `graceMs`) and
 * resolves with that rank's exit code.
 */
export async function launch(options: LaunchOptions): Promise<LaunchResult> {
  validate(options);
  const nnodes = options.nnodes ?? 1;
  const nodeRank = options.nodeRank ?? 0;
  const nproc = options.nprocPerNode;
  const masterAddr = options.masterAddr ?? '127.0.0.1';
  const masterPort = options.masterPort ?? (nnodes === 1 ? await freePort() : 29500);
  const token =
    options.token ??
    process.env.WEBSHARD_TOKEN ??
    (nnodes === 1 ? randomBytes(24).toString('hex') : '');
  if (token === '') {
    throw new ArgumentError(
      'webshard-run',
      'several nodes need a shared join token: pass --token or set WEBSHARD_TOKEN on every node',
    );
  }
  const graceMs = options.graceMs ?? 3000;
  const stdout = options.stdout ?? process.stdout;
  const stderr = options.stderr ?? process.stderr;
  const { file, argv } = commandFor(options);

  const children: ChildProcess[] = [];
  const exitCodes: (number | undefined)[] = new Array(nproc).fill(undefined);
  let state: LaunchState = { kind: 'running' };
  let finish: (result: LaunchResult) => void = () => {};
  const done = new Promise<LaunchResult>((resolve) => {
    finish = resolve;
  });

  const tearDown = (exitCode: number, failedRank?: number) => {
    if (state.kind !== 'running') return;
    for (const child of children) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    }
    const killTimer = setTimeout(() => {
      for (const child of children) {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      }
    }, graceMs);
    state = { kind: 'tearingDown', exitCode, killTimer };
    if (failedRank !== undefined) state.failedRank = failedRank;
  };

  const onSignal = (signal: NodeJS.Signals) => {
    for (const child of children) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    }
    tearDown(128 + (constants.signals[signal] ?? 0));
  };
  const forwarded: NodeJS.Signals[] =
    options.forwardSignals === false ? [] : ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const signal of forwarded) process.on(signal, onSignal);

  const settle = () => {
    if (exitCodes.some((code) => code === undefined)) return;
    for (const signal of forwarded) process.off(signal, onSignal);
    const codes = exitCodes as number[];
    if (state.kind === 'tearingDown') {
      clearTimeout(state.killTimer);
      const result: LaunchResult = { exitCode: state.exitCode, rankExitCodes: codes };
      if (state.failedRank !== undefined) result.failedRank = state.failedRank;
      finish(result);
    } else {
      finish({ exitCode: 0, rankExitCodes: codes });
    }
  };

  for (let localRank = 0; localRank < nproc; localRank++) {
    const rank = nodeRank * nproc + localRank;
    const child = spawn(file, argv, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        ...options.env,
        RANK: String(rank),
        LOCAL_RANK: String(localRank),
        WORLD_SIZE: String(nnodes * nproc),
        LOCAL_WORLD_SIZE: String(nproc),
        GROUP_RANK: String(nodeRank),
        MASTER_ADDR: masterAddr,
        MASTER_PORT: String(masterPort),
        WEBSHARD_TOKEN: token,
      },
    });
    children.push(child);
    const out = new LinePrefixer(`[rank ${rank}] `, stdout);
    const err = new LinePrefixer(`[rank ${rank}] `, stderr);
    child.stdout?.on('data', (chunk: Buffer) => out.write(chunk));
    child.stderr?.on('data', (chunk: Buffer) => err.write(chunk));
    child.on('error', (error) => {
      err.write(`failed to start ${file}: ${error.message}\n`);
      if (exitCodes[localRank] === undefined) {
        exitCodes[localRank] = 127;
        tearDown(127, rank);
        settle();
      }
    });
    child.on('close', (code, signal) => {
      out.flush();
      err.flush();
      if (exitCodes[localRank] !== undefined) return;
      const exitCode = exitCodeOf(code, signal);
      exitCodes[localRank] = exitCode;
      if (exitCode !== 0) tearDown(exitCode, rank);
      settle();
    });
  }
  return done;
}
