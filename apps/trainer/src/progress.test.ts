import { describe, expect, it } from 'vitest';
import { createProgress, formatBytes, formatStep, type StepRecord } from './progress.js';

const record = (step: number): StepRecord => ({
  step,
  steps: 200,
  loss: 2.345678,
  gradNorm: 1,
  lr: 0.003,
  ms: 93.21,
  tokensPerSecond: 5493.1,
  peakDeviceBytes: 9.3 * 2 ** 20,
});

describe('progress', () => {
  it('prints a plain line per step when stdout is not a terminal', () => {
    let out = '';
    const progress = createProgress((t) => {
      out += t;
    }, false);
    progress.step(record(7), 1);
    progress.line('eval');
    expect(out).toBe(
      'step   7/200 | loss 2.3457 | lr 3.00e-3 | 5493 tok/s | peak 9.3 MiB | 93.2 ms\neval\n',
    );
    expect(formatStep(record(200))).toMatch(/^step 200\/200 \| /);
  });

  it('redraws one bar with loss, tokens/s, peak memory and ETA on a terminal', () => {
    let out = '';
    const progress = createProgress((t) => {
      out += t;
    }, true);
    progress.step(record(50), 10);
    expect(out).toBe(
      '\r\x1b[2K[######..................] 50/200 | loss 2.3457 | 5493 tok/s | peak 9.3 MiB | ETA 0:30',
    );
    out = '';
    progress.line('eval after step 50');
    progress.done();
    expect(out).toBe(
      '\r\x1b[2Keval after step 50\n[######..................] 50/200 | loss 2.3457 | 5493 tok/s | peak 9.3 MiB | ETA 0:30\n',
    );
  });

  it('formats bytes in binary units', () => {
    expect([0, 1023, 1024, 1.5 * 2 ** 30].map(formatBytes)).toEqual([
      '0 B',
      '1023 B',
      '1.0 KiB',
      '1.5 GiB',
    ]);
  });
});
