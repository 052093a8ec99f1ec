import { describe, expect, it } from 'vitest';
import { createCpuBackend } from '@webshard/tensor-core';
import { runShm } from './test-support/launch.js';
import {
  maxRelativeDifference,
  type ParityJob,
  type ParityReport,
  trainReference,
} from './test-support/parity.js';

const backend = createCpuBackend();

async function expectParity(size: number, job: ParityJob): Promise<ParityReport[]> {
  const outcomes = await runShm(size, job);
  const reference = await trainReference(job, size, backend);
  return outcomes.map((outcome) => {
    expect(outcome.status, JSON.stringify(outcome)).toBe('fulfilled');
    const report = (outcome as { value: ParityReport }).value;
    expect(maxRelativeDifference(report.params, reference)).toBeLessThan(1e-6);
    return report;
  });
}

describe('shm parity', () => {
  for (const size of [1, 2, 3, 4]) {
    it(`${size} rank(s): overlapped buckets train like one process on the whole batch`, async () => {
      const [report] = await expectParity(size, { steps: 3, rows: 4, options: { messageSize: 40 } });
      // Several buckets, in the order gradients arrive (the output layer's first).
      expect(report!.buckets.at(-1)!.length).toBeGreaterThan(2);
      expect(report!.buckets.at(-1)![0]).toContain('4.bias');
    });
  }
});
