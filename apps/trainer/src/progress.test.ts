import { describe, expect, it } from 'vitest';
import { createProgress, fitFields, formatBytes, formatStep, type StepRecord } from './progress.js';

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

  it('redraws one bar with loss, lr, tokens/s, elapsed and remaining time and peak memory on a wide terminal', () => {
    let out = '';
    const progress = createProgress(
      (t) => {
        out += t;
      },
      true,
      { columns: () => 200 },
    );
    progress.step(record(50), 10);
    const bar =
      '[######..................] 50/200 | loss 2.3457 | lr 3.00e-3 | 5493 tok/s | 0:10<0:30 | peak 9.3 MiB';
    expect(out).toBe(`\r\x1b[2K${bar}`);
    out = '';
    progress.line('eval after step 50');
    progress.done();
    expect(out).toBe(`\r\x1b[2Keval after step 50\n${bar}\n`);
  });

  it('fits 60, 80 and 200 columns (never wraps), dropping the least important fields first', () => {
    const drawn: Record<number, string> = {};
    for (const columns of [60, 80, 200]) {
      let out = '';
      const progress = createProgress(
        (t) => {
          out += t;
        },
        true,
        { columns: () => columns },
      );
      progress.step({ ...record(1234), steps: 100000, tokensPerSecond: 123456 }, 3725);
      const line = out.split('\x1b[2K').at(-1)!;
      expect(line.length, `${columns} columns`).toBeLessThan(columns);
      drawn[columns] = line;
    }
    expect(drawn[200]).toBe(
      '[........................] 1234/100000 | loss 2.3457 | lr 3.00e-3 | 123456 tok/s | 1:02:05<82:48:59 | peak 9.3 MiB',
    );
    expect(drawn[80]).toBe(
      '[......................] 1234/100000 | loss 2.3457 | lr 3e-3 | 1:02:05<82:48:59',
    );
    expect(drawn[60]).toBe('[............] 1234/100000 | loss 2.3457 | 1:02:05<82:48:59');
  });

  it('draws the bar again at the new width when the terminal is resized', () => {
    let columns = 200;
    let resize: (() => void) | null = null;
    let out = '';
    const progress = createProgress(
      (t) => {
        out += t;
      },
      true,
      {
        columns: () => columns,
        onResize: (redraw) => {
          resize = redraw;
          return () => {
            resize = null;
          };
        },
      },
    );
    progress.step(record(50), 10);
    columns = 60;
    out = '';
    resize!();
    expect(out).toBe('\r\x1b[2K[####..........] 50/200 | loss 2.3457 | lr 3e-3 | 0:10<0:30');
    progress.done();
    expect(resize).toBeNull();
  });

  it('fits fields by shortening, then dropping, then cutting', () => {
    const fields = [
      { text: 'aaaa', priority: 0 },
      { text: 'bbbb', short: 'b', priority: 1 },
      { text: 'cccc', priority: 2 },
    ];
    expect(fitFields(fields, 100)).toBe('aaaa | bbbb | cccc');
    expect(fitFields(fields, 15)).toBe('aaaa | b | cccc');
    expect(fitFields(fields, 10)).toBe('aaaa | b');
    expect(fitFields(fields, 3)).toBe('aaa');
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
