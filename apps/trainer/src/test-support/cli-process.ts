import { type ChildProcess, spawn } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { FIXTURES } from './fixtures.js';

/*
 * The CLI as a process of its own, for the tests of jobs whose members come and go (the elastic
 * tests kill, freeze and start members): started in a process group of its own so a test can stop
 * or kill the CLI with its child, its output captured, the JSONL it writes read back.
 */
const CLI = join(import.meta.dirname, '..', 'cli.ts');

/** Every CLI process started, so that `killStarted` can end what a failed test left running. */
const started: ChildProcess[] = [];

/** A started CLI: the child, its stdout so far, and how it ended. */
export interface Started {
  child: ChildProcess;
  stdout: () => string;
  /** Its stderr so far. */
  stderr: () => string;
  done: Promise<{ code: number | null; signal: string | null; stderr: string }>;
}

/** `webshard-train args` from the fixtures folder, with `env` added to this process's. */
export function cli(args: readonly string[], env: Record<string, string> = {}): Started {
  const child = spawn(
    process.execPath,
    ['--conditions=@webshard/source', '--import', 'tsx', CLI, ...args],
    {
      cwd: FIXTURES,
      stdio: ['ignore', 'pipe', 'pipe'],
      // A process group of its own, so the test can stop and kill the CLI with its child.
      detached: true,
      env: { ...process.env, INIT_CWD: undefined, ...env },
    },
  );
  started.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const done = new Promise<{ code: number | null; signal: string | null; stderr: string }>(
    (resolve) => child.on('close', (code, signal) => resolve({ code, signal, stderr })),
  );
  return { child, stdout: () => stdout, stderr: () => stderr, done };
}

/**
 * The environment of a CLI that must open no listening socket: ./listen-guard.mjs loaded into it
 * and its child, so that any `listen` throws and is said on stderr.
 */
export function listenGuardEnv(): Record<string, string> {
  const guard = join(import.meta.dirname, 'listen-guard.mjs');
  return { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import ${guard}`.trim() };
}

/** SIGKILL to every started CLI still running (an `afterAll`). */
export function killStarted(): void {
  for (const child of started) {
    if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGKILL');
  }
}

/** Sends `signal` to each CLI's whole process group (the CLI runs the trainer in a child). */
export function signalAll(members: readonly Started[], signal: NodeJS.Signals): void {
  for (const m of members) process.kill(-m.child.pid!, signal);
}

/** Polls `probe` every 50 ms until it gives a value; throws after `timeoutMs`. */
export async function until<T>(
  what: string,
  probe: () => T | undefined | null | Promise<T | undefined | null>,
  timeoutMs = 40_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== null) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * How each of `members` ended, once all have; after `timeoutMs` it throws instead, naming each
 * one still running (its pid, whether it is stopped) with the tail of its output, so that a test
 * that would hang until vitest's timeout says which process did not end and where it was.
 */
export async function allEnded(
  members: readonly Started[],
  timeoutMs = 60_000,
): Promise<Awaited<Started['done']>[]> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      describeRunning(members).then(
        (said) => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${said}`)),
        reject,
      );
    }, timeoutMs);
  });
  try {
    return await Promise.race([Promise.all(members.map((m) => m.done)), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The members still running, each with its pid, state and the last lines it printed. */
async function describeRunning(members: readonly Started[]): Promise<string> {
  const said: string[] = [];
  for (const [index, m] of members.entries()) {
    if (m.child.exitCode !== null || m.child.signalCode !== null) continue;
    const state = (await stopped(m)) ? 'stopped' : 'running';
    const tail = (text: string) => text.split('\n').slice(-8).join('\n  ');
    said.push(
      `process ${index} (pid ${m.child.pid}, ${state}):\n  stdout: ${tail(m.stdout())}\n  stderr: ${tail(m.stderr())}`,
    );
  }
  return said.length === 0 ? 'their close events' : said.join('\n');
}

/** A line of the JSONL log: a step's record or a change of membership. */
export interface Line {
  event?: 'membership';
  step: number;
  loss?: number;
  worldSize?: number;
  left?: number[];
  joined?: number[];
  /** diloco: the bytes a step's outer sync sent, on the steps that ran one. */
  outerBytesSent?: number;
  /** A step's: the whole batch's tokens over its wall time (the line has no ms). */
  tokensPerSecond?: number;
  /** A step's: the loop's wall clock since it began, in seconds. */
  seconds?: number;
}

/** The JSONL log at `path` ([] before it exists). */
export async function lines(path: string): Promise<Line[]> {
  const text = await readFile(path, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Line);
}

/**
 * Reads `path` every 50 ms into `latest()` (a line being written does not parse yet: the next
 * read has it whole); `stop` ends it.
 */
export function followLog(path: string): { latest: () => Line[]; stop: () => void } {
  let read: Line[] = [];
  const timer = setInterval(() => {
    lines(path).then(
      (got) => {
        read = got;
      },
      () => {},
    );
  }, 50);
  return { latest: () => read, stop: () => clearInterval(timer) };
}

/**
 * `webshard-train --elastic-coordinator 0` with its bounds (`min`, `max`, `waitSeconds`) and any
 * `extra` flags, once it prints the URL members join at.
 */
export async function startCoordinator(
  min: number,
  max: number,
  waitSeconds: number,
  extra: readonly string[] = [],
): Promise<{ coordinator: Started; url: string }> {
  const coordinator = cli([
    ...['--elastic-coordinator', '0', '--min-world-size', String(min)],
    ...['--max-world-size', String(max), '--elastic-wait-seconds', String(waitSeconds)],
    ...extra,
  ]);
  const url = await until(
    'the coordinator',
    () => /--elastic (wss?:\/\/\S+)/.exec(coordinator.stdout())?.[1],
  );
  return { coordinator, url };
}

/** Whether a process of `member`'s group is stopped (state T in /proc): frozen, not yet woken. */
export async function stopped(member: Started): Promise<boolean> {
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    // pid (comm) state ppid pgrp ...: the fields after the command's closing parenthesis.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === member.child.pid && state === 'T') return true;
  }
  return false;
}
