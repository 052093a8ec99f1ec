import { WebshardError } from '@webshard/tensor-core';

/**
 * The base of every error `@webshard/fsdp` throws. Messages begin with the operation and name the
 * unit (its module path, `<root>` for the outermost) and the rank: `[forward] unit 'transformer.h.0'
 * rank 1: ...`.
 */
export class FsdpError extends WebshardError {
  readonly op: string;
  constructor(op: string, detail: string, options: { code?: string; cause?: unknown } = {}) {
    super(`[${op}] ${detail}`, { code: options.code ?? 'E_FSDP', cause: options.cause });
    this.op = op;
  }
}

/** Options that cannot work together, or a group that does not fit them. */
export class FsdpConfigError extends FsdpError {
  constructor(op: string, detail: string) {
    super(op, detail, { code: 'E_FSDP_CONFIG' });
  }
}

/**
 * A call that the unit's training state does not allow: forward inside `summonFullParams`, a second
 * backward through a unit that is still reducing, and the like. `unit` is the unit's module path,
 * `state` the state it was in, `expected` the states that would have allowed the call.
 */
export class FsdpStateError extends FsdpError {
  readonly unit: string;
  readonly rank: number;
  readonly state: string;
  readonly expected: readonly string[];
  constructor(
    op: string,
    unit: string,
    rank: number,
    state: string,
    expected: readonly string[],
    detail: string,
  ) {
    super(
      op,
      `unit '${unit}' rank ${rank}: ${detail} (state ${state}, expected ${expected.join(' or ')})`,
      { code: 'E_FSDP_STATE' },
    );
    this.unit = unit;
    this.rank = rank;
    this.state = state;
    this.expected = expected;
  }
}

/**
 * A module that cannot be wrapped as asked: already wrapped, a parameter shared by two units with
 * different shapes, parameters of several dtypes in one flat parameter.
 */
export class FsdpWrapError extends FsdpError {
  constructor(op: string, detail: string) {
    super(op, detail, { code: 'E_FSDP_WRAP' });
  }
}

/**
 * A file that could not be written (`ENOSPC`, `EACCES`, a directory in the way): the message names
 * the path and the system's code, which Node's own errors for a write on an open file do not.
 * Nothing was replaced: the previous file, if any, is whole.
 */
export class FileWriteError extends FsdpError {
  readonly path: string;
  readonly errno: string | undefined;
  constructor(path: string, detail: string, errno: string | undefined, cause?: unknown) {
    super('write', `${path}: ${detail}`, { code: 'E_FSDP_WRITE', cause });
    this.path = path;
    this.errno = errno;
  }

  /** `error` (from writing `path`) as a `FileWriteError`, unless it is one already. */
  static from(path: string, error: unknown): FileWriteError {
    if (error instanceof FileWriteError) return error;
    const errno = (error as { code?: unknown })?.code;
    const code = typeof errno === 'string' ? errno : undefined;
    const reason =
      code === 'ENOSPC'
        ? 'no space left on device (ENOSPC)'
        : code === 'EDQUOT'
          ? 'disk quota exceeded (EDQUOT)'
          : `${(error as Error)?.message?.split('\n')[0] ?? String(error)}`;
    return new FileWriteError(path, `could not be written: ${reason}`, code, error);
  }
}

/**
 * A shard store that could not keep or give back a shard: a file missing, of the wrong size, or
 * unreadable. `file` is the file (or key) it was about, so the message says which.
 */
export class FsdpStorageError extends FsdpError {
  readonly file: string;
  constructor(op: string, file: string, detail: string, cause?: unknown) {
    super(op, `file '${file}': ${detail}`, { code: 'E_FSDP_STORAGE', cause });
    this.file = file;
  }
}
