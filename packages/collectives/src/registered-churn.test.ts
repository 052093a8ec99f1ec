import { describe, expect, it } from 'vitest';
import { ProcessGroup } from './process-group.js';
import { createNetworkWorld } from './test-support/network-world.js';
import { type ChurnJob, type ChurnReport, runChurn } from './test-support/registered-churn.js';
import { tsxBootstrap } from './test-support/shm/shm-suite-run.js';
import { launchThreads } from './transports/shm/launch-threads.js';

// [Note: registered buffers]: buffers freed and allocated again between collectives, at sizes
// that send them back at other units' offsets, with gathers in flight (FSDP's pattern), give the
// results of ordinary arrays on every rank.
const job: ChurnJob = { steps: 6, counts: [4099, 1000, 4099, 16_411, 1000, 4099], ahead: 1 };

function expectClean(reports: ChurnReport[]): void {
  for (const report of reports) {
    expect(report.errors).toEqual([]);
    expect(report.ops).toBe(job.steps * job.counts.length * 2);
    expect(report.registered).toBe(true);
    // Every operand registered: every collective ran in place.
    expect(report.stagedOps).toBe(0);
  }
}

describe('registered buffers freed and allocated between collectives', () => {
  for (const size of [2, 4]) {
    it(`give exact all-gathers and reduce-scatters on ${size} shm ranks`, async () => {
      const outcomes = await launchThreads<ChurnJob, ChurnReport>(
        size,
        tsxBootstrap('./registered-churn-worker.ts'),
        job,
        {
          eval: true,
          execArgv: ['--conditions=@webshard/source'],
          group: { timeoutMs: 60_000 },
          slotBytes: 4096,
        },
      );
      const reports = outcomes.map((outcome) => {
        expect(outcome.status, JSON.stringify(outcome)).toBe('fulfilled');
        return (outcome as { value: ChurnReport }).value;
      });
      expectClean(reports);
    });

    it(`give exact all-gathers and reduce-scatters on ${size} tcp ranks`, async () => {
      const world = await createNetworkWorld('tcp', size);
      const groups = world.transports.map((t) =>
        ProcessGroup.fromTransport(t, { segmentBytes: 4096, smallMessageBytes: 64 }),
      );
      try {
        expectClean(await Promise.all(groups.map((g) => runChurn(g, job))));
      } finally {
        await Promise.all(groups.map((g) => g.close()));
        await world.close();
      }
    });
  }
});
