import type { Backend } from '@webshard/tensor-core';
import type { TrainConfig } from '../config.js';
import type { StopFlag } from '../interrupt.js';
import type { ProgressTerminal } from '../progress.js';
import type { TrainSummary } from '../run/run-io.js';

/** Where one rank writes, and how it makes its backend. */
export interface RankIO {
  stdout(text: string): void;
  stderr(text: string): void;
  isTTY: boolean;
  /** The directory the user ran the command in (ranks started as processes resolve paths there). */
  cwd: string;
  createBackend?: (config: TrainConfig, vocabSize: number) => Promise<Backend>;
  /** Set when a signal asks the job to stop ([Note: interrupts] in ../interrupt.ts). */
  stop?: StopFlag;
  /** The terminal's width and resizes, for rank 0's progress bar. */
  terminal?: ProgressTerminal;
}

/** How a multi-rank run ended: rank 0's summary where it ran in this thread, or the failure. */
export type RanksOutcome =
  | { ok: true; summary?: TrainSummary }
  | { ok: false; exitCode: 1 | 2; error?: unknown; rank?: number }
  /** Ranks that were processes stopped after a signal, and printed why themselves. */
  | { ok: false; exitCode: 1; error: 'interrupted' };
