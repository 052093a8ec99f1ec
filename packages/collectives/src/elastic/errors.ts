import { WebshardError } from '@webshard/tensor-core';

/**
 * An elastic group failed: the coordinator could not be reached or refused the join, it went
 * away, or a sync point or admission ran past its deadline. `op` is the step that failed (`join`,
 * `sync`, `coordinator`), `member` the coordinator's id of the member that reports it, when known.
 * Messages begin with the op: `[elastic.sync] member 3: ...`.
 */
export class ElasticError extends WebshardError {
  /** The step that failed: `join`, `sync`, `coordinator`, `link`. */
  readonly op: string;
  /** The coordinator's id of the member that reports it, when known. */
  readonly member: number | undefined;
  constructor(
    op: string,
    detail: string,
    options: { member?: number; code?: string; cause?: unknown } = {},
  ) {
    const who = options.member === undefined ? '' : `member ${options.member}: `;
    super(`[elastic.${op}] ${who}${detail}`, {
      code: options.code ?? 'E_ELASTIC',
      cause: options.cause,
    });
    this.op = op;
    this.member = options.member;
  }
}

/**
 * The world shrank below `minWorldSize` and no member joined within the coordinator's wait
 * (`waitedMs`): the job stops. Every member's `sync()` and the coordinator's `failed` promise
 * reject with it; `worldSize` is how many members were left.
 */
export class ElasticWorldTooSmallError extends ElasticError {
  /** How many members the world had left. */
  readonly worldSize: number;
  /** The coordinator's `minWorldSize` (`--min-world-size`). */
  readonly minWorldSize: number;
  /** How long the coordinator waited for newcomers, in ms. */
  readonly waitedMs: number;
  constructor(
    op: string,
    fields: { worldSize: number; minWorldSize: number; waitedMs: number; member?: number },
  ) {
    super(
      op,
      `the world has ${fields.worldSize} member(s), below the minimum world size ${fields.minWorldSize} (--min-world-size), and no member joined within ${fields.waitedMs} ms`,
      {
        code: 'E_WORLD_TOO_SMALL',
        ...(fields.member !== undefined ? { member: fields.member } : {}),
      },
    );
    this.worldSize = fields.worldSize;
    this.minWorldSize = fields.minWorldSize;
    this.waitedMs = fields.waitedMs;
  }
}
