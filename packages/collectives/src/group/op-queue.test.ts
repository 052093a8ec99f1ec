import { describe, expect, it } from 'vitest';
import { type AbortReason, GroupAbortedError } from '../errors.js';
import { ProcessGroup } from '../process-group.js';
import type { Transport } from '../transport-contract.js';
import { createLocalTransports } from '../transports/local/local-transport.js';
import { ABORT_GRACE_MS } from './op-queue.js';

// [Note: an abort does not undo a finished op]: an abort raised after op #0 reaches a lagging rank
// between the moment the last thing its op #0 waited for happened and the moment its body sees it.

/** What rank 0's `group.abort(...)` raises when its own work fails after op #0. */
const rankZeroGivesUp: AbortReason = {
  kind: 'user',
  origin: 0,
  message: 'rank 0 failed: out of data',
};

/**
 * Rank 1's transport: once `lag` is set, a receive of `bytes` bytes completes only after `lag`
 * settled and the transport was aborted with `reason` (the listener runs before the receiver's
 * continuation, as when a lagging thread's shm barrier wakes after the abort came).
 */
function laggingTransport(
  transport: Transport,
  bytes: number,
  reason: AbortReason,
): { transport: Transport; lag: (until: Promise<unknown>) => void } {
  let until: Promise<unknown> | null = null;
  const recv = transport.recv.bind(transport);
  transport.recv = (peer, tag, dst, ...rest) => {
    const received = recv(peer, tag, dst, ...rest);
    if (until === null || dst.byteLength !== bytes) return received;
    const wait = until;
    return received.then(async () => {
      await wait.catch(() => {});
      transport.abort(reason);
    });
  };
  return { transport, lag: (promise) => (until = promise) };
}

describe('OpQueue after an abort', () => {
  it('completes an op whose data had arrived when an abort raised after it reached the rank', async () => {
    const [zero, one] = createLocalTransports(2);
    const lagging = laggingTransport(one!, 32, rankZeroGivesUp);
    const groups = [zero!, lagging.transport].map((t) => ProcessGroup.fromTransport(t));
    const inputs = [0, 1].map((r) => Float32Array.from({ length: 8 }, (_, i) => i + 10 * r));
    const first = groups[0]!.allReduce(inputs[0]!);
    lagging.lag(first.wait());
    const lateStart = performance.now();
    const late = groups[1]!.allReduce(inputs[1]!);
    await first.wait();
    await late.wait();
    // Done as soon as its body was: the grace is an upper bound, not a wait.
    expect(performance.now() - lateStart).toBeLessThan(ABORT_GRACE_MS);
    const sum = Float32Array.from({ length: 8 }, (_, i) => 2 * i + 10);
    expect(inputs[1]).toEqual(sum);
    expect(inputs[0]).toEqual(sum);
    // The next call fails with the abort, as it does on rank 0.
    for (const group of groups) {
      const next = group.allReduce(new Float32Array(8)).wait();
      await expect(next).rejects.toBeInstanceOf(GroupAbortedError);
      await expect(next).rejects.toThrow(
        `[allReduce] rank ${group.rank} (seq 1): the group was aborted earlier by rank 0 (user): rank 0 failed: out of data`,
      );
    }
    await Promise.all(groups.map((group) => group.close()));
  });

  it('still fails at once an op whose data had not arrived', async () => {
    const [zero, one] = createLocalTransports(2);
    const groups = [zero!, one!].map((t) => ProcessGroup.fromTransport(t));
    // Rank 0 never makes the call: rank 1's op waits for it when rank 0 aborts.
    const started = performance.now();
    const pending = groups[1]!.allReduce(new Float32Array(8)).wait();
    expect(groups[1]!.abortReason).toBeNull();
    setTimeout(() => zero!.abort(rankZeroGivesUp), 20);
    await expect(pending).rejects.toBeInstanceOf(GroupAbortedError);
    // Every rank reads who aborted the world (a launcher tells the cause from its consequences).
    expect(groups.map((g) => g.abortReason)).toEqual([rankZeroGivesUp, rankZeroGivesUp]);
    await expect(pending).rejects.toThrow(
      '[allReduce] rank 1 (seq 0): group aborted: rank 0 failed: out of data (reported by rank 0)',
    );
    expect(performance.now() - started).toBeLessThan(ABORT_GRACE_MS / 2);
    await Promise.all(groups.map((group) => group.close()));
  });
});
