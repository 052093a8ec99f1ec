import { describe, expect, it } from 'vitest';
import type { DType } from '../../dtype.js';
import { binaryLaunch } from './elementwise-kernels.js';

// [Note: one division for a broadcast of two dims]: which index a broadcast operand gets, read off
// the WGSL (the values are the ops suites' business, on every backend).

function operand(shape: number[], dtype: DType = 'f32') {
  const size = shape.reduce((p, d) => p * d, 1);
  return { storage: { buffer: null, byteSize: size * 4 }, offset: 0, dtype, size, shape };
}

function launchWgsl(bShape: number[], outShape: number[]): string {
  const launch = binaryLaunch('add', operand(outShape), operand(bShape), operand(outShape));
  return launch.program.wgsl(launch.dtypes);
}

/** The body of `idx_b` in the launch's WGSL (the scalar form). */
function indexOfB(bShape: number[], outShape: number[]): string {
  const wgsl = launchWgsl(bShape, outShape);
  const start = wgsl.indexOf('fn idx_b(');
  const line = wgsl.slice(start, wgsl.indexOf('\n', start));
  return line.endsWith('}') ? line : wgsl.slice(start, wgsl.indexOf('\n}', start) + 2);
}

/** How the quad form reads b ([Note: element-wise kernels four elements a load]). */
function quadReadOfB(bShape: number[], outShape: number[]): string {
  const wgsl = launchWgsl(bShape, outShape);
  const start = wgsl.indexOf('  let vb = ');
  return start < 0 ? '' : wgsl.slice(start + 2, wgsl.indexOf('\n', start));
}

// Params: the output's offset and size, a's and b's offsets, then the merged dims [512, n]: the
// row length is prm[5]. Rows of 190 take the scalar form (190 is not a multiple of 4), rows of
// 192 the quads.
describe('the index of a broadcast operand (WebGPU element-wise kernels)', () => {
  it('a bias over [16, 32, 190] is one modulo of the row length, from the params', () => {
    expect(indexOfB([190], [16, 32, 190])).toBe('fn idx_b(i: u32) -> u32 { return i % prm[5u]; }');
  });

  it('a value per row of [16, 32, 190] is one division by the row length', () => {
    expect(indexOfB([16, 32, 1], [16, 32, 190])).toBe(
      'fn idx_b(i: u32) -> u32 { return i / prm[5u]; }',
    );
  });

  it('a broadcast of three dims after merging keeps the general strided index', () => {
    const index = indexOfB([16, 1, 192], [16, 32, 192]);
    expect(index).toContain('for (var k = 2; k >= 0; k--)');
    expect(quadReadOfB([16, 1, 192], [16, 32, 192])).toBe('');
  });

  it('rows of 192 read a bias a quad at a time, and a value per row once for four', () => {
    expect(quadReadOfB([192], [16, 32, 192])).toBe(
      'let vb = b[(prm[3u] >> 2u) + q % (prm[5u] >> 2u)];',
    );
    expect(quadReadOfB([16, 32, 1], [16, 32, 192])).toBe(
      'let vb = vec4<f32>(ld_b(prm[3u] + (q << 2u) / prm[5u]));',
    );
    expect(quadReadOfB([16, 32, 192], [16, 32, 192])).toBe('let vb = b[(prm[3u] >> 2u) + q];');
  });
});
