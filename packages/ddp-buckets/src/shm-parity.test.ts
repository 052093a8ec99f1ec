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
    expect(maxRelativeDifference(report.params, reference.params)).toBeLessThan(1e-6);
    expect(maxRelativeDifference(report.grads, reference.grads)).toBeLessThan(1e-5);
    return report;
  });
}

describe('shm parity', () => {
  for (const size of [1, 2, 3, 4]) {
    it(`${size} rank(s): overlapped buckets train like one process on the whole batch`, async () => {
      const [report] = await expectParity(size, {
        steps: 3,
        rows: 4,
        options: { messageSize: 40 },
      });
      // Several buckets, in the order gradients arrive (the output layer's first).
      expect(report!.buckets.at(-1)!.length).toBeGreaterThan(2);
      expect(report!.buckets.at(-1)![0]).toContain('4.bias');
    });
  }
});

describe('shm parity for every option (2 ranks)', () => {
  const jobs: [string, ParityJob][] = [
    ['delayAllreduce', { steps: 3, rows: 4, options: { delayAllreduce: true, messageSize: 40 } }],
    ['allreduceTriggerParams', { steps: 3, rows: 4, triggerWeights: true }],
    [
      'retainAllreduceBuffers',
      { steps: 3, rows: 4, options: { messageSize: 100, retainAllreduceBuffers: true } },
    ],
    [
      'allreduceAlwaysFp32 on f32',
      { steps: 3, rows: 4, options: { messageSize: 100, allreduceAlwaysFp32: true } },
    ],
    [
      'gradientAverage: false',
      { steps: 3, rows: 4, options: { messageSize: 100, gradientAverage: false } },
    ],
    [
      'gradientPredivideFactor',
      { steps: 3, rows: 4, options: { messageSize: 100, gradientPredivideFactor: 2 } },
    ],
    ['noSync accumulation', { steps: 3, rows: 4, accumulate: 3, options: { messageSize: 100 } }],
  ];
  for (const [title, job] of jobs) {
    it(title, async () => {
      const reports = await expectParity(2, job);
      const { buckets, allReduces } = reports[0]!;
      if (job.options?.delayAllreduce) expect(buckets[0]!.length).toBe(1);
      // The parameter check, one pass in the recording step, then one per bucket per step: the
      // micro-batches inside noSync send nothing.
      expect(allReduces).toBe(1 + 1 + (job.steps - 1) * buckets.at(-1)!.length);
      if (job.triggerWeights) {
        // Cut at every weight: the output layer's bias and weight, then one bucket per layer.
        expect(reports[0]!.buckets[0]).toEqual([
          ['4.bias', '4.weight'],
          ['2.bias', '2.weight'],
          ['0.bias', '0.weight'],
        ]);
      }
    });
  }

  it('freezing a parameter mid-training rebuilds the buckets', async () => {
    const reports = await expectParity(2, {
      steps: 3,
      rows: 4,
      freezeAt: 1,
      options: { messageSize: 100 },
    });
    const names = (step: number) => reports[0]!.buckets[step]!.flat();
    expect(names(0)).toContain('0.bias');
    expect(names(1)).not.toContain('0.bias');
    expect(names(1)).toHaveLength(5);
  });

  it('f16 gradients, with and without allreduceAlwaysFp32, match f16 training on the whole batch', async () => {
    for (const allreduceAlwaysFp32 of [false, true]) {
      const job: ParityJob = {
        steps: 1,
        rows: 4,
        dtype: 'f16',
        options: { messageSize: 100, allreduceAlwaysFp32 },
      };
      const outcomes = await runShm(2, job);
      const reference = await trainReference(job, 2, backend);
      for (const outcome of outcomes) {
        expect(outcome.status, JSON.stringify(outcome)).toBe('fulfilled');
        const { grads } = (outcome as { value: ParityReport }).value;
        // Each rank's f16 gradient is rounded before the sum: within a few f16 ulps.
        expect(maxRelativeDifference(grads, reference.grads)).toBeLessThan(1e-2);
      }
    }
  });
});

describe('shm failures', () => {
  it('a parameter that gets no gradient fails every rank naming it', async () => {
    const outcomes = await runShm(2, {
      steps: 2,
      rows: 4,
      unusedBias: true,
      options: { messageSize: 100 },
    });
    // Each rank finds the missing gradient on its own at the end of backward. The first rank to
    // fail leaves the group, so a slower rank still waiting on a bucket may see the abort first:
    // every rank fails, and at least one names the parameter.
    let named = 0;
    for (const outcome of outcomes) {
      expect(outcome.status).toBe('rejected');
      const { error } = outcome as { error: { name: string; message: string } };
      if (error.name === 'DdpUnusedParameterError') {
        expect(error.message).toContain('got no gradient: 4.bias.');
        named += 1;
      } else {
        expect(error.name).toBe('DdpGroupAbortedError');
      }
    }
    expect(named).toBeGreaterThan(0);
  });

  it('a rank killed mid-backward makes the others fail naming it', async () => {
    const outcomes = await runShm(
      2,
      { steps: 3, rows: 4, dieAt: { rank: 1, step: 1 }, options: { messageSize: 100 } },
      5_000,
    );
    expect(outcomes[1]!.status).toBe('exited');
    expect(outcomes[0]!.status).toBe('rejected');
    const { error } = outcomes[0] as { error: { name: string; message: string } };
    expect(error.name).toBe('DdpGroupAbortedError');
    // Rank 0 sees the loss in its all-reduce, or (a loaded machine) finds the group aborted when
    // its backward begins: then the launcher's own words say which worker exited; or it issues the
    // all-reduce after the abort, which the group refuses naming the rank that aborted it (as
    // fsdp's shm-parity.test.ts accepts; seen in a fresh-clone CI run, 1 of 7).
    expect(error.message).toMatch(
      /^\[backward\] rank 0: the process group was aborted: (\[allReduce\] rank 0 \(seq \d+\): )?(the group was aborted earlier by rank 1 \(peer-lost\): )?rank 1's worker exited/,
    );
  });
});
