import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { ArgumentError } from '@webshard/tensor-core';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { type AbortReason, GroupAbortedError } from '../errors.js';
import { ProcessGroup } from '../process-group.js';
import { createNetworkWorld } from '../test-support/network-world.js';
import { DEFAULT_MAX_UNEXPECTED_BYTES, resolveUnexpectedBudget } from './unexpected-budget.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const MiB = 1 << 20;
const MESSAGES = 48;

/** Payload bytes held in ArrayBuffers once garbage is collected. */
function retainedBytes(): number {
  gc();
  gc();
  return process.memoryUsage().arrayBuffers;
}

afterEach(() => {
  vi.unstubAllEnvs();
});

/**
 * #33 item 7: an authenticated peer sending 48 valid 4 MiB messages on tags no group uses grew
 * rank 0 by 192 MiB. With a budget per peer ([Note: the unexpected-message budget]), rank 0 holds
 * at most the budget, then aborts naming the sender; its group fails with a typed error and the
 * process goes on.
 */
describe.each([
  ['tcp', 'option'],
  ['ws', 'option'],
  ['tcp', 'env'],
  ['ws', 'env'],
] as const)('48 messages of 4 MiB on unused tags over %s, budget by %s', (kind, how) => {
  it('abort rank 0 naming the sender once 32 MiB are held, not 192 MiB', async () => {
    const budget = 32 * MiB;
    if (how === 'env') vi.stubEnv('WEBSHARD_MAX_UNEXPECTED_BYTES', String(budget));
    const shape = how === 'option' ? { maxUnexpectedBytes: budget } : {};
    const world = await createNetworkWorld(kind, 2, 'test-token', shape);
    try {
      const [receiver, sender] = world.transports as [
        (typeof world.transports)[0],
        (typeof world.transports)[0],
      ];
      const group = ProcessGroup.fromTransport(receiver, { timeoutMs: 20_000 });
      const aborted = new Promise<AbortReason>((resolve) => receiver.onAbort(resolve));
      // An op in flight on rank 0 (rank 1 never joins it): the abort fails it.
      const pending = group
        .barrier()
        .wait()
        .catch((e: unknown) => e);
      const before = retainedBytes();
      const payload = new Uint8Array(4 * MiB).fill(7);
      let sent = 0;
      for (; sent < MESSAGES; sent++) {
        const done = await sender.send(0, 0x7000_0000 + sent, payload).then(
          () => true,
          () => false,
        );
        if (!done) break;
        if (receiver.abortReason !== null) break;
      }
      const reason = await aborted;
      const detail = `rank 0 holds ${budget} bytes from rank 1 that no receive has claimed; a message of ${4 * MiB} bytes on tag ${0x7000_0000 + 8} would pass the budget of ${budget} bytes per peer (raise it with the transport's maxUnexpectedBytes or WEBSHARD_MAX_UNEXPECTED_BYTES)`;
      expect(reason).toEqual({ kind: 'error', origin: 0, peer: 1, message: detail });
      const error = await pending;
      expect(error).toBeInstanceOf(GroupAbortedError);
      expect((error as GroupAbortedError).reason).toEqual(reason);
      expect((error as GroupAbortedError).peer).toBe(1);
      expect((error as Error).message).toBe(`[barrier] rank 0 (seq 0): group aborted: ${detail}`);
      // Held at most the budget, and nothing of it once aborted (without the budget: 192 MiB).
      expect(sent).toBeLessThan(MESSAGES);
      expect((receiver as unknown as { unexpectedBytes: number }).unexpectedBytes).toBe(budget);
      expect(retainedBytes() - before).toBeLessThan(24 * MiB);
    } finally {
      await world.close();
    }
  }, 60_000);
});

describe('resolveUnexpectedBudget', () => {
  it('takes the option, then WEBSHARD_MAX_UNEXPECTED_BYTES, then 256 MiB', () => {
    expect(resolveUnexpectedBudget(5)).toBe(5);
    vi.stubEnv('WEBSHARD_MAX_UNEXPECTED_BYTES', '1024');
    expect(resolveUnexpectedBudget(undefined)).toBe(1024);
    vi.stubEnv('WEBSHARD_MAX_UNEXPECTED_BYTES', '');
    expect(resolveUnexpectedBudget(undefined)).toBe(DEFAULT_MAX_UNEXPECTED_BYTES);
  });

  it('refuses a value that is not a whole number of bytes, naming the variable', () => {
    vi.stubEnv('WEBSHARD_MAX_UNEXPECTED_BYTES', '64MiB');
    expect(() => resolveUnexpectedBudget(undefined)).toThrow(
      new ArgumentError(
        'transport',
        'WEBSHARD_MAX_UNEXPECTED_BYTES=64MiB: the budget for unclaimed messages per peer must be a whole number of bytes >= 0',
      ),
    );
    expect(() => resolveUnexpectedBudget(-1)).toThrow(/^\[transport\] maxUnexpectedBytes: /);
  });
});
