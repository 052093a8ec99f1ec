import { describe, expect, it } from 'vitest';
import type { TensorCase } from './test-support/registered-tensor-rank.js';
import { launchThreads } from './transports/shm/launch-threads.js';
import { tsxBootstrap } from './test-support/shm/shm-suite-run.js';

describe('CPU tensors over registered buffers (#13 item 6)', () => {
  it('take the in-place paths on shm (no copying round) with the bits of ordinary tensors', async () => {
    const outcomes = await launchThreads<number, TensorCase[]>(
      3,
      tsxBootstrap('../registered-tensor-rank.ts'),
      1009,
      { eval: true, execArgv: ['--conditions=@webshard/source'], slotBytes: 65536 },
    );
    for (const outcome of outcomes) {
      expect(outcome.status, JSON.stringify(outcome)).toBe('fulfilled');
      const cases = (outcome as { value: TensorCase[] }).value;
      expect(cases.map((c) => c.op)).toEqual(['allReduce', 'reduceScatter', 'allGather']);
      for (const c of cases) {
        expect(c.result, c.op).toEqual(c.plain);
        expect(c.rounds, c.op).toBe(0);
      }
    }
  });
});
