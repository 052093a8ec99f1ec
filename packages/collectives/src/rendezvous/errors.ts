import { WebshardError } from '@webshard/tensor-core';

/**
 * A rendezvous failure: the store could not be reached, refused the join (wrong token), or a
 * `wait`/`barrier` ran past its deadline. `missingRanks` lists the ranks that never arrived at a
 * barrier; `missingKeys` the keys a `wait` did not see.
 */
export class RendezvousError extends WebshardError {
  readonly op: string;
  readonly rank: number | undefined;
  readonly missingKeys: readonly string[];
  readonly missingRanks: readonly number[];
  constructor(
    op: string,
    detail: string,
    options: {
      rank?: number;
      code?: string;
      missingKeys?: readonly string[];
      missingRanks?: readonly number[];
      cause?: unknown;
    } = {},
  ) {
    const who = options.rank === undefined ? '' : `rank ${options.rank}: `;
    super(`[${op}] ${who}${detail}`, {
      code: options.code ?? 'E_RENDEZVOUS',
      cause: options.cause,
    });
    this.op = op;
    this.rank = options.rank;
    this.missingKeys = options.missingKeys ?? [];
    this.missingRanks = options.missingRanks ?? [];
  }
}
