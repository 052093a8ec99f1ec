import { describe, expect, it } from 'vitest';
import type { DType } from '../../dtype.js';
import { binaryLaunch } from './elementwise-kernels.js';

// [Note: one division for a broadcast of two dims]: which index a broadcast operand gets, read off
// the WGSL (the values are the ops suites' business, on every backend).

function operand(shape: number[], dtype: DType = 'f32') {
  const size = shape.reduce((p, d) => p * d, 1);
  return { storage: { buffer: null, byteSize: size * 4 }, offset: 0, dtype, size, shape };
}

/** The body of `idx_b` in the launch's WGSL. */
function indexOfB(bShape: number[], outShape: number[]): string {
  const launch = binaryLaunch('add', operand(outShape), operand(bShape), operand(outShape));
  const wgsl = launch.program.wgsl(launch.dtypes);
  const start = wgsl.indexOf('fn idx_b(');
  const line = wgsl.slice(start, wgsl.indexOf('\n', start));
  return line.endsWith('}') ? line : wgsl.slice(start, wgsl.indexOf('\n}', start) + 2);
}

// Params: the output's offset and size, a's and b's offsets, then the merged dims [512, 192]: the
// row length is prm[5].
describe('the index of a broadcast operand (WebGPU element-wise kernels)', () => {
  it('a bias over [16, 32, 192] is one modulo of the row length, from the params', () => {
    expect(indexOfB([192], [16, 32, 192])).toBe('fn idx_b(i: u32) -> u32 { return i % prm[5u]; }');
  });

  it('a value per row of [16, 32, 192] is one division by the row length', () => {
    expect(indexOfB([16, 32, 1], [16, 32, 192])).toBe(
      'fn idx_b(i: u32) -> u32 { return i / prm[5u]; }',
    );
  });

  it('a broadcast of three dims after merging keeps the general strided index', () => {
    const index = indexOfB([16, 1, 192], [16, 32, 192]);
    expect(index).toContain('for (var k = 2; k >= 0; k--)');
  });
});
