import { createLocalGroups } from '@webshard/collectives';
import { createCpuBackend, Linear } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { AutoModeTrial } from './auto-mode.js';
import { DistributedDataParallel } from './distributed-data-parallel.js';
import { DdpArgumentError } from './errors.js';
import { runShm } from './test-support/launch.js';
import {
  maxRelativeDifference,
  type ParityJob,
  type ParityReport,
  trainRank,
  trainReference,
} from './test-support/parity.js';

const backend = createCpuBackend();
const STEPS = 1 + AutoModeTrial.STEPS + 2;
const job: ParityJob = {
  steps: STEPS,
  rows: 4,
  options: { messageSize: 40, delayAllreduce: 'auto' },
};

/** Every rank chose the same mode at the same step, from the same timings; buckets to match. */
function expectOneChoice(reports: ParityReport[]): void {
  const decidedAt = AutoModeTrial.STEPS; // the recording step, then the trial's
  for (const report of reports) {
    expect(report.modes.slice(0, decidedAt)).toEqual(Array(decidedAt).fill('deciding'));
    expect(report.modes.slice(decidedAt)).toEqual(
      Array(STEPS - decidedAt).fill(reports[0]!.modes.at(-1)),
    );
    expect(report.autoTimings).toEqual(reports[0]!.autoTimings);
  }
  const mode = reports[0]!.modes.at(-1)!;
  expect(['overlap', 'delay']).toContain(mode);
  const { delayMs, overlapMs } = reports[0]!.autoTimings!;
  expect(delayMs).toBeGreaterThan(0);
  expect(overlapMs).toBeGreaterThan(0);
  expect(mode).toBe(overlapMs <= delayMs ? 'overlap' : 'delay');
  // The delayed mode sends one bucket per dtype; the overlapped one several.
  const last = reports[0]!.buckets.at(-1)!;
  if (mode === 'delay') expect(last).toHaveLength(1);
  else expect(last.length).toBeGreaterThan(1);
}

describe("delayAllreduce: 'auto'", () => {
  for (const size of [2, 3]) {
    it(`${size} local ranks time both modes, agree on the faster and train like one process`, async () => {
      const groups = createLocalGroups(size, { timeoutMs: 10_000 });
      try {
        const reports = await Promise.all(groups.map((g) => trainRank(g, job, backend)));
        const reference = await trainReference(job, size, backend);
        // Ten AdamW steps, at three ranks with the ring's sums in two orders: f32's 1e-5.
        for (const report of reports) {
          expect(maxRelativeDifference(report.params, reference.params)).toBeLessThan(1e-5);
        }
        expectOneChoice(reports);
      } finally {
        await Promise.all(groups.map((g) => g.close()));
      }
    });
  }

  it('2 shm ranks (a thread each, timings of their own) agree on one mode', async () => {
    const outcomes = await runShm(2, job);
    const reports = outcomes.map((outcome) => {
      expect(outcome.status, JSON.stringify(outcome)).toBe('fulfilled');
      return (outcome as { value: ParityReport }).value;
    });
    const reference = await trainReference(job, 2, backend);
    for (const report of reports) {
      expect(maxRelativeDifference(report.params, reference.params)).toBeLessThan(1e-6);
    }
    expectOneChoice(reports);
  });

  it('reports the fixed modes without a trial', async () => {
    const [group] = createLocalGroups(1);
    const model = () => new Linear(2, 2, { backend });
    expect(new DistributedDataParallel(model(), { group: group! }).allreduceMode).toBe('overlap');
    expect(
      new DistributedDataParallel(model(), { group: group!, delayAllreduce: true }).allreduceMode,
    ).toBe('delay');
    const auto = new DistributedDataParallel(model(), { group: group!, delayAllreduce: 'auto' });
    expect(auto.allreduceMode).toBe('deciding');
    expect(auto.autoTimings).toBeNull();
    await group!.close();
  });

  it('refuses a delayAllreduce that is not true, false or auto, by name', () => {
    const [group] = createLocalGroups(1);
    expect(
      () =>
        new DistributedDataParallel(new Linear(2, 2, { backend }), {
          group: group!,
          delayAllreduce: 'yes' as never,
        }),
    ).toThrow(DdpArgumentError);
    expect(
      () =>
        new DistributedDataParallel(new Linear(2, 2, { backend }), {
          group: group!,
          delayAllreduce: 'yes' as never,
        }),
    ).toThrow("delayAllreduce must be true, false or 'auto', got yes");
  });
});
