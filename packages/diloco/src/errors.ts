import { WebshardError } from '@webshard/tensor-core';

/** Where a `DilocoError` happened: the operation and the group rank that reports it. */
export interface DilocoErrorFields {
  /** `DiLoCo`, `step`, `outerSync`, `compressedAverage`, `loadStateDict`... */
  readonly op: string;
  /** The reporting rank in the group (-1 before the group is known). */
  readonly rank: number;
}

/**
 * Base of the errors `@webshard/diloco` throws. Messages begin with the op and the rank:
 * `[outerSync] rank 1: ...`.
 */
export class DilocoError extends WebshardError {
  readonly op: string;
  readonly rank: number;

  constructor(
    fields: DilocoErrorFields,
    detail: string,
    options: { code?: string; cause?: unknown } = {},
  ) {
    super(`[${fields.op}] rank ${fields.rank}: ${detail}`, {
      code: options.code ?? 'E_DILOCO',
      cause: options.cause,
    });
    this.op = fields.op;
    this.rank = fields.rank;
  }
}

/** An option or argument DiLoCo cannot take; `option` names it. */
export class DilocoArgumentError extends DilocoError {
  readonly option: string;
  constructor(fields: DilocoErrorFields, option: string, detail: string) {
    super(fields, detail, { code: 'E_DILOCO_ARGUMENT' });
    this.option = option;
  }
}

/**
 * DiLoCo was used out of order (a step while an outer sync is running, a sync after a failed one)
 * or given state that does not fit it (a state dict of another model). `state` is where it was.
 */
export class DilocoStateError extends DilocoError {
  readonly state: string;
  constructor(fields: DilocoErrorFields, state: string, detail: string, cause?: unknown) {
    super(fields, detail, { code: 'E_DILOCO_STATE', cause });
    this.state = state;
  }
}
