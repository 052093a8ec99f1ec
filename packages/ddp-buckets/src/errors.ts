import { WebshardError } from '@webshard/tensor-core';

/** Where a `DdpError` happened: the wrapper's operation and the group rank that reports it. */
export interface DdpErrorFields {
  /** `DistributedDataParallel`, `forward`, `backward`, `noSync`... */
  readonly op: string;
  /** The reporting rank in the wrapper's group (-1 before the group is known). */
  readonly rank: number;
}

/**
 * Base of the errors `@webshard/ddp-buckets` throws. Messages begin with the op and the rank:
 * `[backward] rank 1: ...`.
 */
export class DdpError extends WebshardError {
  readonly op: string;
  readonly rank: number;

  constructor(
    fields: DdpErrorFields,
    detail: string,
    options: { code?: string; cause?: unknown } = {},
  ) {
    super(`[${fields.op}] rank ${fields.rank}: ${detail}`, {
      code: options.code ?? 'E_DDP',
      cause: options.cause,
    });
    this.op = fields.op;
    this.rank = fields.rank;
  }
}

/** An option or argument the wrapper cannot take; `option` names it. */
export class DdpArgumentError extends DdpError {
  readonly option: string;
  constructor(fields: DdpErrorFields, option: string, detail: string) {
    super(fields, detail, { code: 'E_DDP_ARGUMENT' });
    this.option = option;
  }
}

/** Ranks wrap different parameters. `index` and `parameter` are the first differing parameter's. */
export class DdpParameterMismatchError extends DdpError {
  readonly index: number;
  /** The first differing entry's name (as rank 0 has it). */
  readonly parameter: string;
  /** The lowest rank whose parameter differs from rank 0's. */
  readonly differingRank: number;
  constructor(
    fields: DdpErrorFields,
    index: number,
    parameter: string,
    differingRank: number,
    detail: string,
  ) {
    super(fields, detail, { code: 'E_DDP_PARAMETER_MISMATCH' });
    this.index = index;
    this.parameter = parameter;
    this.differingRank = differingRank;
  }
}

/** The wrapper was used in the wrong order (backward twice without a forward, after a failure). */
export class DdpStateError extends DdpError {
  readonly state: string;
  constructor(fields: DdpErrorFields, state: string, detail: string, cause?: unknown) {
    super(fields, detail, { code: 'E_DDP_STATE', cause });
    this.state = state;
  }
}

/**
 * Backward ended with buckets that were never reduced because some parameters that require grad got
 * no gradient. `parameters` names them.
 */
export class DdpUnusedParameterError extends DdpError {
  readonly parameters: readonly string[];
  constructor(fields: DdpErrorFields, parameters: readonly string[]) {
    super(
      fields,
      `backward ended before every bucket was reduced: ${parameters.length} parameter(s) that require grad got no gradient: ${parameters.join(', ')}. Every rank must produce a gradient for every parameter that requires grad (freeze the others with requiresGrad = false)`,
      { code: 'E_DDP_UNUSED_PARAMETER' },
    );
    this.parameters = parameters;
  }
}

/** The wrapper's group was aborted (a rank died, a deadline passed, `abort()`); `cause` says why. */
export class DdpGroupAbortedError extends DdpError {
  constructor(fields: DdpErrorFields, cause?: unknown) {
    const why = cause instanceof Error ? `: ${cause.message}` : '';
    super(fields, `the process group was aborted${why}`, { code: 'E_DDP_GROUP_ABORTED', cause });
  }
}
