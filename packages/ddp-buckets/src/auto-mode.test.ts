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
  const { delayMs, overlapMs, overlapToDelay } = reports[0]!.autoTimings!;
  expect(delayMs).toBeGreaterThan(0);
  expect(overlapMs).toBeGreaterThan(0);
  expect(mode).toBe(overlapToDelay <= 1 ? 'overlap' : 'delay');
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

  // A constructed trial on a machine shared with other work: every step runs at twice its time
  // but one, which fell on a quiet moment. By each mode's fastest step the quiet one decided, and
  // the slower mode won; the median of adjacent pairs keeps the faster.
  const loaded = (ms: number) => 2 * ms;
  const cases = [
    {
      faster: 'overlap',
      // overlap 80 ms a step, delay 100 ms; the second delayed step was quiet.
      steps: [loaded(100), loaded(80), 100, loaded(80), loaded(100), loaded(80)],
    },
    {
      faster: 'delay',
      // delay 80 ms a step, overlap 100 ms; the second overlapped step was quiet.
      steps: [loaded(80), loaded(100), loaded(80), 100, loaded(80), loaded(100)],
    },
  ] as const;
  for (const { faster, steps } of cases) {
    it(`keeps the faster mode (${faster}) when one step of the other fell on a quiet moment`, async () => {
      const groups = createLocalGroups(2, { timeoutMs: 10_000 });
      try {
        const chosen = await Promise.all(
          groups.map(async (group) => {
            const trial = new AutoModeTrial();
            expect(trial.next()).toBe('overlap');
            expect(trial.record('overlap', 1000)).toBe(false); // the untimed warm-up
            let done = false;
            for (const ms of steps) {
              // Rank 1 a little faster: the slowest rank's steps count.
              done = trial.record(trial.next(), group.rank === 0 ? ms : ms * 0.9);
            }
            expect(done).toBe(true);
            return trial.decide(group);
          }),
        );
        expect(chosen).toEqual([faster, faster]);
      } finally {
        await Promise.all(groups.map((g) => g.close()));
      }
    });
  }

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
