import { WebshardError } from '@webshard/tensor-core';
import { chooseBackend } from './backend-choice.js';
import { parseOptions } from './cli/options.js';
import { USAGE } from './cli/usage.js';
import type { TrainConfig } from './config.js';
import { InterruptedError, NonFiniteLossError, UsageError } from './errors.js';
import { type StopFlag, type StopSignal, signalExitCode } from './interrupt.js';
import type { ProgressTerminal } from './progress.js';
import { runRanks } from './ranks/start-ranks.js';
import type { TrainSummary } from './run/run-io.js';
import { train } from './train.js';
import { commandLine } from './report/command-line.js';

/** Where the CLI writes and where it runs; tests pass their own. */
export interface CliIO {
  stdout(text: string): void;
  stderr(text: string): void;
  /** Whether stdout is a terminal (a progress bar instead of lines). */
  isTTY: boolean;
  /** The directory relative paths are read against: where the user ran the command. */
  cwd: string;
  /** Set by SIGINT or SIGTERM: the run stops after the current step ([Note: interrupts]). */
  stop?: StopFlag;
  /** The terminal's width and resizes, for the progress bar when `isTTY`. */
  terminal?: ProgressTerminal;
}

/** What `main` did: its exit code, and the run's summary when it trained (its backend is the caller's to dispose). */
export interface CliOutcome {
  exitCode: 0 | 1 | 2 | 130 | 143;
  summary?: TrainSummary;
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ');
}

/**
 * `webshard-train`: parse, check, train, write. Never throws: returns exit code 0 on success, 2
 * for input refused before training (a `UsageError`: one line on stderr, no file touched), 1 for a
 * failure during training (a non-finite loss names its step; other errors their type), 130 or
 * 143 for a run that SIGINT or SIGTERM stopped (one line: the step, and the checkpoint saved).
 */
export async function main(argv: readonly string[], io: CliIO): Promise<CliOutcome> {
  let config: TrainConfig | 'help';
  try {
    config = parseOptions(argv, io.cwd);
  } catch (error) {
    return fail(error, io);
  }
  if (config === 'help') {
    io.stdout(USAGE);
    return { exitCode: 0 };
  }
  try {
    const runIO = {
      stdout: io.stdout,
      stderr: io.stderr,
      isTTY: io.isTTY,
      cwd: io.cwd,
      ...(io.stop === undefined ? {} : { stop: io.stop }),
      ...(io.terminal === undefined ? {} : { terminal: io.terminal }),
      createBackend: (c: TrainConfig, vocabSize: number) => chooseBackend(c, vocabSize, io.stdout),
      commandLine: commandLine(argv),
    };
    if (config.elasticCoordinator) {
      // Node only, loaded on demand: [Note: elastic training in the trainer].
      const { hostElasticCoordinator } = await import('./ranks/elastic-coordinator.js');
      await hostElasticCoordinator(
        config.elasticCoordinator,
        config.browserHost,
        (line) => io.stdout(`${line}\n`),
        config,
      );
      return { exitCode: 0 };
    }
    if (config.elastic) {
      const { trainElastic } = await import('./run/elastic-run.js');
      // A member shapes its links as WEBSHARD_LINK says ([Note: the link shaper] in collectives).
      const link = process.env.WEBSHARD_LINK || undefined;
      return {
        exitCode: 0,
        summary: await trainElastic(config, runIO, link === undefined ? {} : { link }),
      };
    }
    if (config.strategy === 'single' || config.strategy === 'offload') {
      return { exitCode: 0, summary: await train(config, runIO) };
    }
    const outcome = await runRanks(config, argv, runIO);
    if (outcome.ok)
      return { exitCode: 0, ...(outcome.summary ? { summary: outcome.summary } : {}) };
    if (outcome.error === undefined) return { exitCode: outcome.exitCode };
    if (outcome.error === 'interrupted') {
      return { exitCode: signalExitCode(io.stop?.signal ?? 'SIGINT') };
    }
    return fail(outcome.error, io, config, 'rank' in outcome ? outcome.rank : undefined);
  } catch (error) {
    return fail(error, io, config);
  }
}

function fail(error: unknown, io: CliIO, config?: TrainConfig, rank?: number): CliOutcome {
  const where = rank === undefined ? '' : `rank ${rank}: `;
  const name = (error as Error | undefined)?.name;
  if (InterruptedError.isInstance(error) || name === 'InterruptedError') {
    // Every rank stopped at the same step; the lead (rank 0) says so, once.
    const { lead = true, signal } = error as { lead?: boolean; signal?: StopSignal };
    if (lead) io.stderr(`webshard-train: ${(error as Error).message}\n`);
    return { exitCode: signalExitCode(signal ?? io.stop?.signal ?? 'SIGINT') };
  }
  if (UsageError.isInstance(error) || name === 'UsageError') {
    io.stderr(`webshard-train: ${where}${oneLine((error as Error).message)}\n`);
    return { exitCode: 2 };
  }
  if (NonFiniteLossError.isInstance(error) || name === 'NonFiniteLossError') {
    const kept = config?.save
      ? `; ${config.save} was not written (an existing file keeps the last good weights)`
      : '';
    io.stderr(`webshard-train: ${where}${(error as Error).message}${kept}\n`);
    return { exitCode: 1 };
  }
  const message =
    WebshardError.isInstance(error) || error instanceof Error
      ? `${error.name}: ${error.message}`
      : String(error);
  io.stderr(`webshard-train: ${where}${oneLine(message)}\n`);
  return { exitCode: 1 };
}
