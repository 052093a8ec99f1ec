import { describe, expect, it } from 'vitest';
import { hostMemoryFields } from './host-memory.js';
import { formatStep, type StepRecord } from './progress.js';

describe('host memory in the step record', () => {
  it("is this process's peak resident memory, at least its resident memory now", async () => {
    const before = process.memoryUsage.rss();
    const fields = await hostMemoryFields();
    expect(Object.keys(fields)).toEqual(['peakHostBytes']);
    expect(fields.peakHostBytes).toBeGreaterThanOrEqual(before * 0.9);
    expect(fields.peakHostBytes).toBeLessThanOrEqual(process.resourceUsage().maxRSS * 1024 * 1.1);
  });

  it('shows in the progress line as rss, naming the ranks that share it', () => {
    const record: StepRecord = {
      step: 2,
      steps: 2,
      loss: 8.15,
      gradNorm: 1,
      lr: 0.003,
      ms: 1000,
      tokensPerSecond: 31,
      peakDeviceBytes: 1.7 * 2 ** 30,
    };
    expect(formatStep(record)).toBe(
      'step 2/2 | loss 8.1500 | lr 3.00e-3 | 31 tok/s | peak 1.7 GiB | 1000.0 ms',
    );
    expect(formatStep({ ...record, peakHostBytes: 2.5 * 2 ** 30 })).toBe(
      'step 2/2 | loss 8.1500 | lr 3.00e-3 | 31 tok/s | peak 1.7 GiB | rss 2.5 GiB | 1000.0 ms',
    );
    expect(formatStep({ ...record, peakHostBytes: 5 * 2 ** 30, hostRanksPerProcess: 2 })).toBe(
      'step 2/2 | loss 8.1500 | lr 3.00e-3 | 31 tok/s | peak 1.7 GiB | rss 5.0 GiB for 2 ranks | 1000.0 ms',
    );
  });
});
