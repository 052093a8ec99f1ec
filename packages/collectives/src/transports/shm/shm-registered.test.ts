import { describe, expect, it } from 'vitest';
import { launchThreads } from './launch-threads.js';
import {
  inputValue,
  type RegisteredCase,
  type RegisteredJob,
  type RegisteredShardCase,
} from '../../test-support/shm/shm-registered-cases.js';
import { tsxBootstrap } from '../../test-support/shm/shm-suite-run.js';

// [Note: registered buffers]: all-reduces of buffers from `ProcessGroup.allocate` run in place in
// the shared arena, bit-identical to the copying schedule; a rank without one makes all copy.
const worker = tsxBootstrap('./shm-registered-worker.ts');

/** The first index where two arrays differ (as described for the message), or null. */
function difference(a: ArrayLike<number>, b: ArrayLike<number>): string | null {
  if (a.length !== b.length) return `lengths ${a.length} and ${b.length}`;
  for (let i = 0; i < a.length; i++) {
    if (!Object.is(a[i], b[i])) return `element ${i}: ${a[i]} against ${b[i]}`;
  }
  return null;
}

function reference(c: RegisteredCase, size: number): number[] {
  return Array.from({ length: c.count }, (_, i) => {
    let acc = inputValue(c.dtype, 0, i);
    for (let r = 1; r < size; r++) {
      const v = inputValue(c.dtype, r, i);
      acc = c.op === 'max' ? Math.max(acc, v) : Math.fround(acc + v);
    }
    return c.op === 'avg' ? Math.fround(acc * Math.fround(1 / size)) : acc;
  });
}

describe('registered buffers on shm', () => {
  for (const size of [2, 3, 4]) {
    it(`all-reduce, reduce-scatter and all-gather in place on ${size} ranks, bit-identical to the copying schedules`, async () => {
      // 1, a prime, and (on 2 ranks, to keep the test short) more than one 65536-element piece of
      // a rank's slice.
      const job: RegisteredJob = { counts: size === 2 ? [1, 1009, 65536 * 2 + 7] : [1, 1009] };
      const outcomes = await launchThreads<
        RegisteredJob,
        { cases: RegisteredCase[]; shards: RegisteredShardCase[]; reused: boolean; zeroed: boolean }
      >(size, worker, job, {
        eval: true,
        execArgv: ['--conditions=@webshard/source'],
        group: { timeoutMs: 30_000 },
        slotBytes: 65536,
      });
      for (const outcome of outcomes) {
        expect(outcome.status, JSON.stringify(outcome)).toBe('fulfilled');
        const { cases, reused, zeroed } = (
          outcome as {
            value: {
              cases: RegisteredCase[];
              shards: RegisteredShardCase[];
              reused: boolean;
              zeroed: boolean;
            };
          }
        ).value;
        expect(reused).toBe(true);
        expect(zeroed).toBe(true);
        for (const c of (outcome as { value: { shards: RegisteredShardCase[] } }).value.shards) {
          const label = `${c.op} x ${c.count}`;
          expect(difference(c.result, c.copied), label).toBeNull();
          // In place unless the output lies inside the input (then every rank copies).
          if (c.op === 'reduceScatter, output inside the input')
            expect(c.rounds, label).toBeGreaterThan(0);
          else if (c.op === 'reduceScatter sum') expect(c.rounds, label).toBe(1);
          else expect(c.rounds, label).toBe(0);
        }
        for (const c of cases) {
          const label = `${c.dtype} ${c.op} x ${c.count}, registered on ${c.registered}`;
          expect(difference(c.result, c.copied), label).toBeNull();
          expect(difference(c.result, reference(c, size)), label).toBeNull();
          // In place when every rank's operand is registered; the copying rounds otherwise.
          if (c.registered === 'all') expect(c.rounds, label).toBe(0);
          else expect(c.rounds, label).toBeGreaterThan(0);
        }
      }
    });
  }
});
