import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import type { Writable } from 'node:stream';
import { ArgumentError } from '@webshard/tensor-core';
import { processRanks } from './process-ranks.js';
import { checkRanksPerNode } from './rank-bound.js';
import { type LaunchResult, supervise } from './supervise.js';
import type { ShmHandleOptions } from '../transports/shm/shm-layout.js';
import { threadRanks } from './thread-ranks.js';

export type { LaunchResult } from './supervise.js';
export { LinePrefixer } from './line-prefixer.js';

/** How a node's ranks run: child processes, or worker threads of the launcher over `shm`. */
export type RanksAs = 'processes' | 'threads';

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
  /**
   * `processes` (the default here; the `webshard-run` CLI defaults to `threads` on one node) or
   * `threads`: worker threads of this process over one shared-memory world, whose
   * `initProcessGroup` joins that world ([Note: ranks as threads] in
   * transports/shm/thread-rank.ts) and, with several nodes, the other nodes' over the network
   * ([Note: two-level collectives] in two-level/two-level-transport.ts).
   */
  ranksAs?: RanksAs;
  /** Threads only: Node flags of every rank's worker (default this process's `execArgv`). */
  execArgv?: readonly string[];
  /** Threads only: sizes of the node's shm world (arena slots, rings); tests make them small. */
  shm?: ShmHandleOptions;
  /**
   * Browser tabs that join as the last ranks (`connectBrowserRank`): `WORLD_SIZE` counts them, so
   * the ranks' `initProcessGroup({ backend: 'ws' })` waits for them. Processes, one node only
   * (default 0). See [Note: browser ranks in webshard-run] in cli/browser-ranks.ts.
   */
  browserRanks?: number;
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
  const tabs = options.browserRanks ?? 0;
  if (!Number.isSafeInteger(tabs) || tabs < 0) {
    throw new ArgumentError('webshard-run', `--browser-ranks must be 0 or more, got ${tabs}`);
  }
  if (tabs > 0 && options.ranksAs === 'threads') {
    throw new ArgumentError(
      'webshard-run',
      '--browser-ranks: tabs join over ws, and ranks as threads share one shm world they cannot join: use --ranks-as processes',
    );
  }
  if (tabs > 0 && (options.nnodes ?? 1) > 1) {
    throw new ArgumentError(
      'webshard-run',
      '--browser-ranks: one node only (the tabs are the last ranks of one flat ws world)',
    );
  }
  if (options.ranksAs === 'threads') {
    if (options.noNode) {
      throw new ArgumentError(
        'webshard-run',
        '--no-node runs an executable, which cannot be a thread: use --ranks-as processes',
      );
    }
  } else if (options.ranksAs !== undefined && options.ranksAs !== 'processes') {
    throw new ArgumentError(
      'webshard-run',
      `--ranks-as must be threads or processes, got '${options.ranksAs}'`,
    );
  }
  checkRanksPerNode(options.nprocPerNode, options.ranksAs ?? 'processes');
}

function definedOnly(env: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) if (value !== undefined) out[name] = value;
  return out;
}

/**
 * Starts `nprocPerNode` ranks of a script, as child processes (default) or as worker threads
 * (`ranksAs: 'threads'`), with torchrun's environment (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
 * `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `MASTER_ADDR`, `MASTER_PORT`) plus `WEBSHARD_TOKEN`, prefixes
 * each output line with `[rank R]`, forwards signals, and when one rank fails stops the others
 * (SIGTERM, or an abort of the threads' world; SIGKILL or `terminate()` after `graceMs`) and
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
  const envOf = (localRank: number, rank: number) =>
    definedOnly({
      ...process.env,
      ...options.env,
      RANK: String(rank),
      LOCAL_RANK: String(localRank),
      WORLD_SIZE: String(nnodes * nproc + (options.browserRanks ?? 0)),
      LOCAL_WORLD_SIZE: String(nproc),
      GROUP_RANK: String(nodeRank),
      MASTER_ADDR: masterAddr,
      MASTER_PORT: String(masterPort),
      WEBSHARD_TOKEN: token,
    });
  const common = {
    script: options.script,
    args: options.args ?? [],
    envOf,
    stdout: options.stdout ?? process.stdout,
    stderr: options.stderr ?? process.stderr,
  };
  const start =
    options.ranksAs === 'threads'
      ? threadRanks({
          ...common,
          nprocPerNode: nproc,
          multiNode: nnodes > 1,
          ...(options.execArgv !== undefined ? { execArgv: options.execArgv } : {}),
          ...(options.shm !== undefined ? { shm: options.shm } : {}),
        })
      : processRanks({ ...common, noNode: options.noNode ?? false });
  return supervise(
    {
      nprocPerNode: nproc,
      nodeRank,
      graceMs: options.graceMs ?? 3000,
      forwardSignals: options.forwardSignals !== false,
    },
    start,
  );
}
