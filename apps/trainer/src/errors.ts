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
