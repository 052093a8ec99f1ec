import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { availableParallelism, hostname } from 'node:os';
import { join, resolve } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { ArgumentError } from '@webshard/tensor-core';
import {
  createShmHandle,
  type ShmHandle,
  type ShmHandleOptions,
  writeShmAbort,
} from '../transports/shm/shm-layout.js';
import {
  THREAD_RANK_KEY,
  type ThreadRankData,
  type ThreadRankEvent,
} from '../transports/shm/thread-rank.js';
import { LinePrefixer } from './line-prefixer.js';
import type { StartRank } from './supervise.js';

/** How to start one node's ranks as worker threads over one shm world. */
export interface ThreadRanksOptions {
  script: string;
  args: readonly string[];
  nprocPerNode: number;
  /** Each rank's whole environment (its `process.env`). */
  envOf: (localRank: number, rank: number) => Record<string, string>;
  /** Node flags of every worker (default this process's `execArgv`). */
  execArgv?: readonly string[];
  stdout: Writable;
  stderr: Writable;
  /**
   * Whether the job has other nodes: then the threads' `initProcessGroup` joins them over the
   * network too ([Note: two-level collectives] in two-level/two-level-transport.ts).
   */
  multiNode?: boolean;
  /** Sizes of the shm world (default: 1 MiB arena slots, rings from the rank count). */
  shm?: ShmHandleOptions;
}

/**
 * tsx's ESM API, resolved as `node --import tsx` would resolve it (from the working directory),
 * else from this package; a TypeScript script without tsx installed is an `ArgumentError`.
 */
function tsxApi(): string {
  const bases = [join(process.cwd(), 'noop.js'), import.meta.url];
  for (const base of bases) {
    try {
      const path = createRequire(base).resolve('tsx/esm/api');
      return pathToFileURL(path.replace(/\.cjs$/, '.mjs')).href;
    } catch {
      // Try the next place.
    }
  }
  throw new ArgumentError(
    'webshard-run',
    'running a TypeScript script as threads needs tsx: install it (npm i -D tsx) or run the compiled .js script',
  );
}

/**
 * What a worker runs: a `.js`/`.mjs` script as itself; a TypeScript script through a bootstrap
 * that registers tsx (as the shm tests do), sets `process.argv[1]` to the script (as `node
 * --import tsx script` would) and imports it.
 */
function workerEntry(script: string): { file: string | URL; eval: boolean } {
  const path = resolve(script);
  if (!/\.[mc]?ts$/.test(script)) return { file: pathToFileURL(path), eval: false };
  const code = [
    `process.argv[1] = ${JSON.stringify(path)};`,
    `import(${JSON.stringify(tsxApi())})`,
    `.then((tsx) => { tsx.register(); return import(${JSON.stringify(pathToFileURL(path).href)}); });`,
  ].join('\n');
  return { file: code, eval: true };
}

/** Resolves once `stream` has ended (or closed). */
function ended(stream: Readable): Promise<void> {
  return new Promise((done) => {
    stream.once('end', done);
    stream.once('close', done);
  });
}

/** Resolves with `promise`, or after `ms` if it takes longer (the timer does not linger). */
function within(promise: Promise<unknown>, ms: number): Promise<void> {
  return new Promise((done) => {
    const timer = setTimeout(done, ms);
    void promise.then(() => {
      clearTimeout(timer);
      done();
    });
  });
}

/**
 * Ranks as worker threads of this process over one `shm` world ([Note: ranks as threads] in
 * transports/shm/thread-rank.ts). Each line of a thread's output is prefixed with `[rank R]`, and
 * an exception that escapes a thread is printed there as a process would print it. A thread that
 * throws or exits non-zero aborts the world at once, naming it (`error` or `peer-lost`), so every
 * other rank's pending and next collective fails within milliseconds; so does one that exits with
 * 0 after joining without closing its group. Stopping the others aborts the world too, and
 * killing them is `Worker.terminate()`. A thread that throws exits with 1.
 */
export function threadRanks(options: ThreadRanksOptions): StartRank {
  const handle: ShmHandle = createShmHandle(options.nprocPerNode, {
    cores: availableParallelism(),
    ...options.shm,
  });
  const node = options.multiNode ? { id: randomUUID(), host: hostname() } : undefined;
  const entry = workerEntry(options.script);
  const abort = (rank: number, kind: 'error' | 'peer-lost', message: string) => {
    writeShmAbort(
      handle,
      kind === 'peer-lost'
        ? { kind, origin: rank, peer: rank, message }
        : { kind, origin: rank, message },
    );
  };
  return (localRank, rank, exited) => {
    const data: ThreadRankData = { handle, rank: localRank, ...(node ? { node } : {}) };
    const worker = new Worker(entry.file, {
      eval: entry.eval,
      argv: [...options.args],
      env: options.envOf(localRank, rank),
      execArgv: [...(options.execArgv ?? process.execArgv)],
      workerData: { [THREAD_RANK_KEY]: data },
      stdout: true,
      stderr: true,
    });
    const out = new LinePrefixer(`[rank ${rank}] `, options.stdout);
    const err = new LinePrefixer(`[rank ${rank}] `, options.stderr);
    worker.stdout.on('data', (chunk: Buffer) => out.write(chunk));
    worker.stderr.on('data', (chunk: Buffer) => err.write(chunk));
    let alive = true;
    let joined = false;
    let closed = false;
    worker.on('message', (message: unknown) => {
      if (message === null || typeof message !== 'object') return;
      const event = (message as Record<string, unknown>)[THREAD_RANK_KEY] as ThreadRankEvent;
      if (event === 'joined') joined = true;
      if (event === 'closed') closed = true;
    });
    // A worker's output can arrive after its 'exit': wait for both streams to end.
    const streamsEnded = Promise.all([ended(worker.stdout), ended(worker.stderr)]);
    let exit: () => void = () => {};
    const flushed = new Promise<void>((resolve) => {
      exit = resolve;
    })
      .then(() => within(streamsEnded, 1000))
      .then(() => {
        out.flush();
        err.flush();
      });
    worker.on('error', (error) => {
      err.write(`${error.stack ?? `${error.name}: ${error.message}`}\n`);
      abort(rank, 'error', `rank ${rank}'s thread threw ${error.name}: ${error.message}`);
      // Reported now, not at its exit: the others fail from this abort and may exit first.
      exited(1, flushed);
    });
    worker.on('exit', (code) => {
      alive = false;
      if (code !== 0) {
        abort(rank, 'peer-lost', `rank ${rank}'s thread exited with code ${code}`);
      } else if (joined && !closed) {
        abort(rank, 'peer-lost', `rank ${rank}'s thread exited without closing its group`);
      }
      exit();
      exited(code, flushed);
    });
    const terminate = () => {
      if (alive) void worker.terminate();
    };
    return {
      stop: () => {
        if (alive) abort(rank, 'error', 'webshard-run stopped the ranks');
      },
      kill: terminate,
      signal: terminate,
    };
  };
}
