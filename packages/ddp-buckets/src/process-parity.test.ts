import { createCpuBackend } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { runProcesses } from './test-support/launch.js';
import { maxRelativeDifference, type ParityJob, trainReference } from './test-support/parity.js';

const backend = createCpuBackend();

// Two ranks as separate processes started by webshard-run, over raw sockets and over WebSockets.
describe('parity across processes (webshard-run)', () => {
  const job: ParityJob = { steps: 3, rows: 4, accumulate: 2, options: { messageSize: 100 } };
  for (const transport of ['tcp', 'ws'] as const) {
    it(`2 ranks over ${transport} train like one process on the whole batch`, async () => {
      const { exitCode, reports, output } = await runProcesses(2, transport, job);
      expect(exitCode, output).toBe(0);
      const reference = await trainReference(job, 2, backend);
      for (const report of reports) {
        expect(report, output).not.toBeNull();
        expect(report!.transport).toBe(transport);
        expect(maxRelativeDifference(report!.params, reference.params)).toBeLessThan(1e-6);
        expect(report!.buckets.at(-1)!.length).toBeGreaterThan(1);
      }
    });
  }
});
