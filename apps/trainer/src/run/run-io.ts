import type { Backend, GPT } from '@webshard/tensor-core';
import type { TrainConfig } from '../config.js';
import type { Dataset, TokenizerName } from '../data/dataset.js';
import type { StopSignal } from '../interrupt.js';
import type { MLP } from '../models/mlp.js';
import type { ProgressTerminal, StepRecord } from '../progress.js';
import type { EvalPoint } from '../report/html-report.js';

/** Where a run writes: stdout (progress, results) and whether it is a terminal. */
export interface RunIO {
  stdout(text: string): void;
  isTTY: boolean;
  /** Choose the backend (the CLI's `auto` measures both: [Note: the trainer's default backend]). */
  createBackend?: (config: TrainConfig, vocabSize: number) => Promise<Backend>;
  /**
   * The data set of `path` (default: read the file). A browser rank passes the bytes its page
   * fetched from the Node process that serves it (see [Note: the trainer's platform module]).
   */
  loadData?: (path: string, blockSize: number, tokenizer: TokenizerName) => Promise<Dataset>;
  /** Read after each step: a signal asked the run to stop ([Note: interrupts] in interrupt.ts). */
  stop?: { readonly signal: StopSignal | null };
  /** The terminal's width (and its resizes) when `isTTY`: the bar fits it. */
  terminal?: ProgressTerminal;
  /** The command line that reproduces the run (the report shows it); null where unknown. */
  commandLine?: string;
  /**
   * The clock the loop's `--max-seconds` and each line's `seconds` read, in ms (default
   * `performance.now`); tests give ranks clocks that differ.
   */
  now?: () => number;
  /** Called after each step with its record, on every rank (a tab's page plots its own steps). */
  onStep?: (record: StepRecord) => void;
}

/** What a finished run did. */
export interface TrainSummary {
  model: GPT | MLP;
  backend: Backend;
  records: StepRecord[];
  evals: EvalPoint[];
  /** The last sample ('' for none). */
  sample: string;
}
