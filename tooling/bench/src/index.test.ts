import { describe, expect, it } from 'vitest';
import { formatTable, timesBetter } from './index.js';

describe('timesBetter', () => {
  it('divides value by peer for rates, so a faster rate is above 1', () => {
    expect(
      timesBetter({ name: 'x', metric: 'busbw', value: 300, unit: 'MB/s', peerValue: 100 }),
    ).toBe(3);
  });

  it('divides peer by value for times: a slower step is below 1', () => {
    // The trainer's row that printed 5.77x for a WebGPU step 5.77 times slower than the CPU's.
    const row = { name: 'step', metric: 'webgpu step', value: 310, unit: 'ms', peerValue: 53.8 };
    expect(timesBetter(row)).toBeCloseTo(53.8 / 310, 12);
  });

  it('treats sizes and operation counts as better smaller', () => {
    expect(timesBetter({ name: 'm', metric: 'peak', value: 50, unit: 'MiB', peerValue: 100 })).toBe(
      2,
    );
    expect(timesBetter({ name: 'o', metric: 'staged', value: 4, unit: 'ops', peerValue: 2 })).toBe(
      0.5,
    );
  });

  it('follows an explicit direction over the unit', () => {
    const row = { name: 'h', metric: 'hidden', value: 80, unit: '%', peerValue: 40 };
    expect(timesBetter(row)).toBe(2);
    expect(timesBetter({ ...row, better: 'lower' })).toBe(0.5);
  });

  it('has no ratio without a peer or with a zero', () => {
    expect(timesBetter({ name: 'a', metric: 'm', value: 1, unit: 'ms' })).toBeUndefined();
    expect(
      timesBetter({ name: 'a', metric: 'm', value: 1, unit: 'ms', peerValue: 0 }),
    ).toBeUndefined();
    expect(
      timesBetter({ name: 'a', metric: 'm', value: 0, unit: 'ms', peerValue: 1 }),
    ).toBeUndefined();
  });
});

describe('formatTable', () => {
  it('prints the ratio as times better, above 1 when ours is better, for times as for rates', () => {
    const table = formatTable([
      { name: 'step', metric: 'webgpu step', value: 310, unit: 'ms', peer: 'cpu', peerValue: 53.8 },
      {
        name: 'step',
        metric: 'throughput',
        value: 9514,
        unit: 'tokens/s',
        peer: 'torch',
        peerValue: 3356,
      },
      { name: 'alone', metric: 'time', value: 1, unit: 'ms' },
    ]).split('\n');
    expect(table[0]).toBe(
      '| benchmark | metric | value | unit | peer | peer value | ratio (above 1: better) |',
    );
    expect(table[2]).toBe('| step | webgpu step | 310 | ms | cpu | 53.80 | 0.17x |');
    expect(table[3]).toBe('| step | throughput | 9514 | tokens/s | torch | 3356 | 2.83x |');
    expect(table[4]).toBe('| alone | time | 1.00 | ms | - | - | - |');
  });
});
