import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { relaxedFmaSupport } from './fma-support.js';

/** Whether this x64 or arm64 machine has a fused multiply-add instruction (Linux only). */
function hardwareFma(): boolean | null {
  try {
    const info = readFileSync('/proc/cpuinfo', 'utf8');
    if (process.arch === 'arm64') return true;
    return /^flags\s*:.*\bfma\b/m.test(info);
  } catch {
    return null;
  }
}

describe('relaxedFmaSupport', () => {
  it("is 'fused' on an x64 machine with FMA3 (Node 20 through the flag it sets), 'unfused' without", () => {
    const hardware = hardwareFma();
    if (hardware === null) return void console.log('no /proc/cpuinfo: cannot tell what to expect');
    expect(relaxedFmaSupport()).toBe(hardware ? 'fused' : 'unfused');
  });

  it("is 'none' where the engine cannot validate relaxed SIMD, and without WebAssembly", () => {
    const noRelaxed = { ...WebAssembly, validate: () => false } as unknown as typeof WebAssembly;
    expect(relaxedFmaSupport(noRelaxed)).toBe('none');
    expect(relaxedFmaSupport(null)).toBe('none');
  });

  it("is 'unfused' where the engine rounds the product before the add", () => {
    // An engine whose relaxed_madd is a multiply then an add: the probe sees 0, not 2^-24.
    const unfused = {
      validate: () => true,
      Module: class {},
      Instance: class {
        exports = {
          probe: (a: number, b: number, c: number) => Math.fround(Math.fround(a * b) + c),
        };
      },
    } as unknown as typeof WebAssembly;
    expect(relaxedFmaSupport(unfused)).toBe('unfused');
  });
});
