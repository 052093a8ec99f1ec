import { ArgumentError } from '@webshard/tensor-core';

/** The default budget per peer for messages no receive has claimed: 256 MiB. */
export const DEFAULT_MAX_UNEXPECTED_BYTES = 256 << 20;

/** The environment variable that sets the budget where no option does. */
export const UNEXPECTED_BYTES_VARIABLE = 'WEBSHARD_MAX_UNEXPECTED_BYTES';

/**
 * [Note: the unexpected-message budget]
 * A message that arrives before its receive is copied aside (`Mailbox`) until a receive claims
 * it. Fingerprints go ahead of the data, so a healthy peer's messages often arrive first, but
 * only as far as the ops the two ranks share: a peer that sends on tags no group receives on
 * (#33 item 7: 48 valid 4 MiB frames grew rank 0 by 192 MiB, tcp and ws) could make a rank hold
 * any amount. So each rank holds at most `maxUnexpectedBytes` (256 MiB by default, the option of
 * the transport or `WEBSHARD_MAX_UNEXPECTED_BYTES`) of unclaimed payload per peer. A message
 * that would pass it aborts the transport (kind `error`, naming the peer, the bytes held, the
 * budget and how to raise it), as any protocol violation does: every pending and later op fails
 * with a `GroupAbortedError` whose `peer` is the sender, the process goes on. A legitimate job
 * whose ranks drift further apart than the budget (a 2-rank broadcast of 1 GiB to a rank that is
 * still an op behind) raises it.
 */
export function resolveUnexpectedBudget(option: number | undefined): number {
  if (option !== undefined) return checked(option, 'maxUnexpectedBytes');
  const env =
    typeof process !== 'undefined' && typeof process.env === 'object'
      ? process.env[UNEXPECTED_BYTES_VARIABLE]
      : undefined;
  if (env === undefined || env === '') return DEFAULT_MAX_UNEXPECTED_BYTES;
  const value = /^\d+$/.test(env.trim()) ? Number(env.trim()) : Number.NaN;
  return checked(value, `${UNEXPECTED_BYTES_VARIABLE}=${env}`);
}

function checked(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new ArgumentError(
      'transport',
      `${name}: the budget for unclaimed messages per peer must be a whole number of bytes >= 0`,
    );
  }
  return value;
}
