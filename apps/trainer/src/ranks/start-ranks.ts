import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { constants as osConstants } from 'node:os';
import { Writable } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isMainThread } from 'node:worker_threads';
import { createLocalGroups, initProcessGroup, type ProcessGroup } from '@webshard/collectives';
import { launch, launchThreads } from '@webshard/collectives/node';
import { WebshardError } from '@webshard/tensor-core';
import { checkBatchDivides, type TrainConfig } from '../config.js';
import { InterruptedError, UsageError } from '../errors.js';
import { checkFiles } from '../io/check-files.js';
import { defaultCommProgress } from '../cli/progress-options.js';
import { chooseBackendKind } from '../backend-choice.js';
import { agreeOnJobBackend, type DecideBackend, decideJobBackend } from './job-backend.js';
import { BROWSER_JOIN_MS, type NodeRanksPlan, runWithBrowserRanks } from './browser-ranks.js';
import { train } from '../train.js';
import type { RankIO, RanksOutcome } from './rank-io.js';

/** A rank's deadline for one collective: long enough for a slow step on 2 shared cores. */
const GROUP_TIMEOUT_MS = 120_000;

/**
 * [Note: how ranks start]
 * `--transport` picks where the ranks of a ddp or fsdp run live:
 * - `local`: every rank in this thread (`createLocalGroups`), each with its own backend; the only
 *   choice that shares one WebGPU device. The ranks interleave at every await, so it shows the
 *   strategy's numbers, not parallel speed.
 * - `shm` (the default): one worker thread per rank over shared memory, the fastest transport.
 *   Each thread makes its own backend (a WebGPU device of its own with `--backend webgpu`: the
 *   `webgpu` package finds the adapter in worker threads too).
 * - `tcp`, `ws`: one process per rank. The trainer starts them through `webshard-run`'s launcher
 *   with its own arguments; each child sees torchrun's variables (`RANK`, `WORLD_SIZE`, ...) and
 *   joins the group instead of launching. So `webshard-run --nproc-per-node 2 --no-node
 *   webshard-train --strategy ddp --transport tcp` works too (on one node webshard-run starts
 *   threads over shm by default, which `initProcessGroup` joins), and across machines with
 *   `--nnodes`.
 * Files are checked before any rank starts, so a bad path fails once, with exit 2. Rank 0 prints
 * and writes; a rank that fails makes the others fail fast (the group is aborted naming it).
 */
export async function runRanks(
  config: TrainConfig,
  argv: readonly string[],
  io: RankIO,
): Promise<RanksOutcome> {
  const env = process.env;
  const launched = env.RANK !== undefined && env.WORLD_SIZE !== undefined;
  if (launched && (config.transport === 'tcp' || config.transport === 'ws')) {
    // With browser ranks the launcher counts the Node ranks only; the tabs come after them.
    return joinAsRank(config, io, Number(env.WORLD_SIZE) + config.browserRanks);
  }
  await checkFiles(config);
  if (config.browserRanks > 0) {
    const job = await decideJobBackend(config, decider(io));
    return runWithBrowserRanks(config, io, GROUP_TIMEOUT_MS, (plan) =>
      runProcesses(job, argv, io, plan),
    );
  }
  if (config.transport === 'local' || config.worldSize === 1) return runLocal(config, io);
  // One backend for every rank, decided here ([Note: one backend for the job] in ./job-backend.ts).
  const job = await decideJobBackend(config, decider(io));
  // A signal during the probe: no rank has started, and none need to.
  const signal = io.stop?.signal;
  if (signal) {
    throw new InterruptedError(signal, {
      step: 0,
      steps: config.steps,
      checkpoint: null,
      lead: true,
    });
  }
  if (config.transport === 'shm') return runThreads(job, io);
  return runProcesses(job, argv, io);
}

/** The CLI's `auto` decision, its line printed on `io`. */
function decider(io: RankIO): DecideBackend {
  return (config, vocabSize) => chooseBackendKind(config, vocabSize, io.stdout);
}

/** This process is one rank started by webshard-run: join the group and train. */
async function joinAsRank(
  config: TrainConfig,
  io: RankIO,
  worldSize: number,
): Promise<RanksOutcome> {
  if (config.worldSize !== 1 && config.worldSize !== worldSize) {
    throw new UsageError(
      `--world-size ${config.worldSize} differs from the launcher's WORLD_SIZE ${worldSize}`,
      { option: '--world-size' },
    );
  }
  // webshard-run runs one node's ranks as threads over shm by default: `initProcessGroup` joins
  // that world (with the other nodes' over the flag's transport, `shm+tcp`), so a thread rank is
  // configured as one; the run's label names the group's own transport.
  const rankConfig = {
    ...config,
    worldSize,
    ...(isMainThread ? {} : { transport: 'shm' as const }),
  };
  checkBatchDivides(rankConfig);
  const transport = config.transport as 'tcp' | 'ws';
  // A thread of webshard-run's node runs shm on its worker too (one node; several: refused by
  // initProcessGroup, a usage error below).
  const progress = config.commProgress ?? defaultCommProgress(config);
  const group = await initProcessGroup({
    backend: transport,
    progress,
    timeoutMs: config.browserRanks > 0 ? BROWSER_JOIN_MS : GROUP_TIMEOUT_MS,
    ...(config.browserRanks > 0 ? { worldSize, group: { timeoutMs: GROUP_TIMEOUT_MS } } : {}),
  }).catch((error: unknown) => {
    // The launcher's environment or port is wrong (RANK=3 WORLD_SIZE=2, a busy MASTER_PORT): the
    // user's to fix, so a usage error (exit 2) with the collectives' one-line message.
    const code = WebshardError.isInstance(error) ? (error as WebshardError).code : undefined;
    if (code === 'E_ARGUMENT' || code === 'E_PORT_IN_USE' || code === 'E_PORT_REFUSED') {
      throw new UsageError((error as Error).message, { cause: error });
    }
    throw error;
  });
  try {
    const jobConfig = await agreeOnJobBackend(rankConfig, group, decider(io));
    const summary = await train(jobConfig, io, group);
    return { ok: true, ...(group.rank === 0 ? { summary } : {}) };
  } catch (error) {
    group.abort(`rank ${group.rank} failed: ${(error as Error).message}`);
    throw error;
  } finally {
    await group.close();
  }
}

/**
 * Every rank in this thread; the first rank to fail aborts the world. The failure reported is the
 * cause, not a consequence: a rank that fails after another rank aborted the world (rank 0 aborts
 * before it removes a failed checkpoint's folder, so a rank still writing there fails on a missing
 * file) yields to the rank that aborted it.
 */
async function runLocal(config: TrainConfig, io: RankIO): Promise<RanksOutcome> {
  const groups = createLocalGroups(config.worldSize, { timeoutMs: GROUP_TIMEOUT_MS });
  const failures: { rank: number; error: unknown; consequence: boolean }[] = [];
  const silent = { ...io, stdout: () => {} };
  const runs = groups.map(async (group: ProcessGroup) => {
    try {
      return await train(config, group.rank === 0 ? io : silent, group);
    } catch (error) {
      const reason = group.abortReason;
      failures.push({
        rank: group.rank,
        error,
        consequence: reason !== null && reason.origin !== group.rank,
      });
      // One transport is shared by the ranks: aborting it once aborts every group.
      if (reason === null) group.abort(`rank ${group.rank} failed: ${(error as Error).message}`);
      return null;
    }
  });
  const summaries = await Promise.all(runs);
  await Promise.all(groups.map((g) => g.close()));
  const cause = failures.find((f) => !f.consequence) ?? failures[0];
  if (cause !== undefined) {
    const { rank, error } = cause;
    return { ok: false, exitCode: UsageError.isInstance(error) ? 2 : 1, error, rank };
  }
  return { ok: true, summary: summaries[0]! };
}

/** What a `--transport shm` rank gets (see ./rank-worker.ts). */
export interface RankJob {
  config: TrainConfig;
  isTTY: boolean;
  /** The `BroadcastChannel` rank 0 sends its output on. */
  channel: string;
  /** The buffer of this process's `StopFlag`: the ranks read the signal its thread received. */
  stop?: SharedArrayBuffer;
  /** One i32: the terminal's width, kept current by this thread on every resize. */
  columns: SharedArrayBuffer;
}

/** A message on a rank's output channel. */
export type WorkerLine = { kind: 'stdout' | 'stderr'; text: string } | { kind: 'end' };

/** The module beside this one, as source (run by tsx) or built (`dist/`). */
function sibling(source: string, built: string): { path: string; isSource: boolean } {
  const isSource = import.meta.url.endsWith('.ts');
  return { path: fileURLToPath(new URL(isSource ? source : built, import.meta.url)), isSource };
}

/** One worker thread per rank over shared memory (see ./rank-worker.ts). */
async function runThreads(config: TrainConfig, io: RankIO): Promise<RanksOutcome> {
  const worker = sibling('./rank-worker.ts', './rank-worker.js');
  let file: string = worker.path;
  if (worker.isSource) {
    const tsx = pathToFileURL(
      createRequire(import.meta.url)
        .resolve('tsx/esm/api')
        .replace(/\.cjs$/, '.mjs'),
    ).href;
    const url = pathToFileURL(worker.path).href;
    file = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(url)}); })`;
  }
  // Rank 0's lines come back on a channel of their own, to this thread's `io`, in order; its
  // last message says it is done, so no line is lost to the race with the worker's exit.
  const channelName = `webshard-train-${process.pid}-${randomUUID()}`;
  const channel = new BroadcastChannel(channelName);
  let ended!: () => void;
  const end = new Promise<void>((resolve) => {
    ended = resolve;
  });
  channel.onmessage = (event) => {
    const message = (event as MessageEvent<WorkerLine>).data;
    if (message.kind === 'end') ended();
    else if (message.kind === 'stdout') io.stdout(message.text);
    else io.stderr(message.text);
  };
  // Rank 0 draws the bar at the width this thread reads, in a word it updates on resizes.
  const columns = new SharedArrayBuffer(4);
  const width = new Int32Array(columns);
  const measure = () => Atomics.store(width, 0, io.terminal?.columns() ?? 80);
  measure();
  const unsubscribe = io.terminal?.onResize?.(measure);
  let outcomes: Awaited<ReturnType<typeof launchThreads<RankJob, number>>>;
  try {
    outcomes = await launchThreads<RankJob, number>(
      config.worldSize,
      file,
      {
        config,
        isTTY: io.isTTY,
        channel: channelName,
        columns,
        ...(io.stop === undefined ? {} : { stop: io.stop.buffer }),
      },
      {
        eval: worker.isSource,
        execArgv: worker.isSource ? ['--conditions=@webshard/source'] : [],
        group: { timeoutMs: GROUP_TIMEOUT_MS },
        progress: config.commProgress ?? defaultCommProgress(config),
      },
    );
    await Promise.race([end, new Promise((resolve) => setTimeout(resolve, 1000))]);
  } finally {
    unsubscribe?.();
    channel.close();
  }
  const failures = outcomes.filter((o) => o.status !== 'fulfilled');
  if (failures.length === 0) return { ok: true };
  // The rank that failed first is the one whose error is not the abort it caused in the others.
  const cause =
    failures.find((o) => o.status === 'rejected' && !/Abort|PeerLost/.test(o.error.name)) ??
    failures[0]!;
  if (cause.status === 'exited') {
    io.stderr(`webshard-train: rank ${cause.rank}'s worker exited with code ${cause.exitCode}\n`);
    return { ok: false, exitCode: 1, rank: cause.rank };
  }
  const { name, message } = (cause as { error: { name: string; message: string } }).error;
  const error = Object.assign(
    new Error(message),
    { name },
    io.stop?.signal ? { signal: io.stop.signal } : {},
  );
  return { ok: false, exitCode: name === 'UsageError' ? 2 : 1, error, rank: cause.rank };
}

/**
 * One process per rank, started by webshard-run's launcher with this command's arguments (with
 * browser ranks, the Node ranks only, on the store port and token the page was given).
 */
async function runProcesses(
  config: TrainConfig,
  argv: readonly string[],
  io: RankIO,
  plan?: NodeRanksPlan,
): Promise<RanksOutcome> {
  const cli = sibling('../cli.ts', './cli.js');
  const sink = (write: (text: string) => void) =>
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        write(chunk.toString());
        done();
      },
    });
  const result = await launch({
    nprocPerNode: config.worldSize,
    ...plan,
    script: cli.path,
    // The job's backend, decided above, after the user's flags (the last --backend counts).
    args: [...argv, '--backend', config.backend],
    // Relative paths in `argv` are the user's: every rank resolves them where the user ran this.
    env: {
      INIT_CWD: io.cwd,
      // Each rank's stderr comes back through `io`: it need not filter its own native noise
      // (see [Note: quiet native stderr in the CLIs] in @webshard/collectives) by starting itself
      // again, whoever called this.
      WEBSHARD_STDERR_FILTERED: '1',
      ...(cli.isSource ? { NODE_OPTIONS: '--conditions=@webshard/source' } : {}),
    },
    stdout: sink(io.stdout),
    stderr: sink(io.stderr),
  });
  if (result.exitCode === 0) return { ok: true };
  // Stopped by a signal at a safe point: rank 0 has said where ([Note: interrupts]).
  if (io.stop?.signal && (result.exitCode === 130 || result.exitCode === 143)) {
    return { ok: false, exitCode: 1, error: 'interrupted' };
  }
  if (result.failedRank !== undefined && result.exitCode !== 2) {
    io.stderr(
      `webshard-train: rank ${result.failedRank} ${exitText(result.exitCode)}; stopped the other ranks\n`,
    );
  }
  return {
    ok: false,
    exitCode: result.exitCode === 2 ? 2 : 1,
    ...(result.failedRank === undefined ? {} : { rank: result.failedRank }),
  };
}

/** How a rank's process ended, from its exit code (128 + n: killed by signal n). */
function exitText(code: number): string {
  if (code > 128) {
    const name = Object.entries(osConstants.signals).find(([, n]) => n === code - 128)?.[0];
    return `was killed by ${name ?? `signal ${code - 128}`}`;
  }
  return `exited with code ${code}`;
}
