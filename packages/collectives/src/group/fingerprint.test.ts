import { describe, expect, it } from 'vitest';
import { CollectiveMismatchError } from '../errors.js';
import { ProcessGroup } from '../process-group.js';
import type { Transport } from '../transport-contract.js';
import { createLocalTransports } from '../transports/local/local-transport.js';

// [Note: a mismatch waits for every fingerprint].

/**
 * `transport` takes messages of `bytes` bytes off its medium `ms` late: their receives are posted
 * to it then (an abort meanwhile rejects them, as a socket's unread data).
 */
function slowReceives(transport: Transport, bytes: number, ms: number): Transport {
  const recv = transport.recv.bind(transport);
  transport.recv = (peer, tag, dst, ...rest) => {
    if (dst.byteLength !== bytes) return recv(peer, tag, dst, ...rest);
    return new Promise((resolve) => setTimeout(resolve, ms)).then(() =>
      recv(peer, tag, dst, ...rest),
    );
  };
  return transport;
}

interface Outcome {
  first: number[] | Error;
  second: Error | null;
}

/** Each rank: an all-reduce of 8 elements, then one of 8 where rank `odd` takes max, not sum. */
function runTwo(groups: ProcessGroup[], odd: number): Promise<Outcome[]> {
  return Promise.all(
    groups.map(async (group) => {
      const data = Float32Array.from({ length: 8 }, (_, i) => i + group.rank);
      const first = await group
        .allReduce(data)
        .wait()
        .then(
          () => Array.from(data),
          (error: Error) => error,
        );
      const op = group.rank === odd ? 'max' : 'sum';
      const second = await group
        .allReduce(new Float32Array(8), { op, timeoutMs: 2000 })
        .wait()
        .then(
          () => null,
          (error: Error) => error,
        );
      return { first, second };
    }),
  );
}

function expectMismatchAt(error: Error | null, rank: number, seq: number): void {
  expect(error).toBeInstanceOf(CollectiveMismatchError);
  const mismatch = error as CollectiveMismatchError;
  expect(mismatch.seq).toBe(seq);
  expect(mismatch.message).toMatch(new RegExp(`^\\[allReduce\\] rank ${rank} \\(seq ${seq}\\): `));
  expect(mismatch.message).toContain(`allReduce(max, f32 x 8) as op #${seq}`);
  expect(mismatch.message).toContain(`allReduce(sum, f32 x 8) as op #${seq}`);
}

describe('a mismatch waits for every fingerprint', () => {
  it('fails the mismatched op on a rank still finishing the op before when it was found', async () => {
    const transports = createLocalTransports(3);
    // Rank 2 reads op #0's data (8 f32) 100 ms late: ranks 0 and 1 finish op #0 and find that
    // their op #1 differs (rank 1 takes max) long before rank 2 has finished op #0.
    slowReceives(transports[2]!, 32, 100);
    const groups = transports.map((transport) => ProcessGroup.fromTransport(transport));
    const outcomes = await runTwo(groups, 1);
    const sum = Array.from({ length: 8 }, (_, i) => 3 * i + 3);
    for (const [rank, outcome] of outcomes.entries()) {
      expect({ rank, first: outcome.first }).toEqual({ rank, first: sum });
      expectMismatchAt(outcome.second, rank, 1);
    }
    await Promise.all(groups.map((group) => group.close()));
  });

  it('raises the mismatch, not a timeout, at the deadline when a rank never reaches the op', async () => {
    const transports = createLocalTransports(3);
    const groups = transports.map((transport) =>
      ProcessGroup.fromTransport(transport, { timeoutMs: 200 }),
    );
    // Ranks 0 and 1 differ at op #0; rank 2 never calls it.
    const started = performance.now();
    const errors = await Promise.all(
      [0, 1].map((rank) =>
        groups[rank]!.allReduce(new Float32Array(8), { op: rank === 1 ? 'max' : 'sum' })
          .wait()
          .then(
            () => null,
            (error: Error) => error,
          ),
      ),
    );
    expect(performance.now() - started).toBeLessThan(5000);
    for (const [rank, error] of errors.entries()) expectMismatchAt(error, rank, 0);
    await Promise.all(groups.map((group) => group.close()));
  });
});
