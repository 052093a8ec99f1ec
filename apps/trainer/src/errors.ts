import { WebshardError } from '@webshard/tensor-core';

/**
 * Input the trainer refuses before training starts: a bad flag, a missing or malformed file, a
 * model or batch that cannot fit. The CLI prints its message on one line and exits with code 2,
 * having written nothing. `option` names the flag at fault, when there is one.
 */
export class UsageError extends WebshardError {
  readonly option: string | undefined;
  constructor(detail: string, options: { option?: string; cause?: unknown } = {}) {
    super(detail, {
      code: 'E_USAGE',
      ...(options.cause === undefined ? {} : { cause: options.cause }),
    });
    this.option = options.option;
  }
}

/**
 * A loss that is NaN or infinite during training. The run stops before that step's update (exit
 * code 1), so an existing `--save` file is left as it was, the last good checkpoint.
 */
export class NonFiniteLossError extends WebshardError {
  readonly step: number;
  readonly loss: number;
  constructor(step: number, loss: number) {
    super(`the loss is ${loss} at step ${step}: stopping before its update`, {
      code: 'E_NON_FINITE_LOSS',
    });
    this.step = step;
    this.loss = loss;
  }
}

/**
 * Ranks of one job that run on different backends (which would give different numbers and
 * different speeds): found right after each rank made its backend, before the first step.
 */
export class BackendMismatchError extends WebshardError {
  readonly kinds: readonly string[];
  constructor(kinds: readonly string[]) {
    super(
      `the ranks run on different backends (${kinds.map((k, rank) => `rank ${rank}: ${k}`).join(', ')}): pass --backend cpu|webgpu`,
      { code: 'E_BACKEND_MISMATCH' },
    );
    this.kinds = kinds;
  }
}

/**
 * A run stopped by SIGINT or SIGTERM at a safe point ([Note: interrupts] in interrupt.ts): after
 * `step` of `steps`, with the checkpoint it saved first (null without `--checkpoint-dir`). The CLI
 * prints its message on one line and exits with 130 or 143. Every rank throws it; `lead` is rank
 * 0's (the one that prints).
 */
export class InterruptedError extends WebshardError {
  readonly signal: 'SIGINT' | 'SIGTERM';
  readonly step: number;
  readonly checkpoint: string | null;
  readonly lead: boolean;
  constructor(
    signal: 'SIGINT' | 'SIGTERM',
    at: { step: number; steps: number; checkpoint: string | null; lead: boolean },
  ) {
    const saved =
      at.checkpoint === null
        ? 'nothing saved (--checkpoint-dir saves a checkpoint on an interrupt)'
        : `checkpoint saved: ${at.checkpoint} (--resume to go on)`;
    const when = at.step === 0 ? 'before the first step' : `after step ${at.step} of ${at.steps}`;
    super(`interrupted by ${signal} ${when}; ${saved}`, {
      code: 'E_INTERRUPTED',
    });
    this.signal = signal;
    this.step = at.step;
    this.checkpoint = at.checkpoint;
    this.lead = at.lead;
  }
}

/**
 * A checkpoint rank 0 found incomplete on disk just before committing it
 * ([Note: a checkpoint is checked before it is committed], checkpoint/commit-check.ts): `file`,
 * written by `rank`, is missing, truncated, or differs from what the step's manifests record.
 * Step `step` was not renamed into place, its temporary folder `dir` is removed, and `latest`
 * still names the previous checkpoint. The message begins with the op: `[checkpoint] step 2,
 * rank 1: ...`.
 */
export class CheckpointCommitError extends WebshardError {
  readonly op = 'checkpoint';
  readonly step: number;
  readonly rank: number;
  readonly file: string;
  readonly dir: string;
  constructor(at: { step: number; rank: number; file: string; dir: string }, detail: string) {
    super(
      `[checkpoint] step ${at.step}, rank ${at.rank}: ${at.file} ${detail}; the step is not committed (latest is unchanged): ${at.dir}`,
      { code: 'E_CHECKPOINT_COMMIT' },
    );
    this.step = at.step;
    this.rank = at.rank;
    this.file = at.file;
    this.dir = at.dir;
  }
}
