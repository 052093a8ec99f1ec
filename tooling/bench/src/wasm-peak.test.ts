import { describe, expect, it } from 'vitest';
import {
  copyBandwidthGbPerS,
  enableRelaxedSimd,
  PEAK_FLOPS_PER_TRIP,
  wasmPeakFunction,
  wasmPeakModule,
} from './wasm-peak.js';

describe('the WebAssembly SIMD peak module', () => {
  it('validates and computes 12 chains of acc = acc * 0.5 + 0.5 from 0', () => {
    expect(WebAssembly.validate(wasmPeakModule())).toBe(true);
    const peak = wasmPeakFunction();
    // After k trips each chain holds 1 - 0.5^k (exact in f32): 12 of them summed.
    expect(peak(1)).toBe(12 * 0.5);
    expect(peak(3)).toBe(12 * 0.875);
    // 0.5 (1 - 2^-24) + 0.5 is halfway between two floats and rounds to even: 1, the fixed point.
    expect(peak(40)).toBe(12);
    expect(PEAK_FLOPS_PER_TRIP).toBe(96);
  });

  it('has a multiply-add variant that computes the same chains where the engine runs relaxed SIMD', () => {
    enableRelaxedSimd();
    if (!WebAssembly.validate(wasmPeakModule(true))) {
      return void console.log('no relaxed SIMD in this engine: skipped');
    }
    expect(wasmPeakModule(true).length).toBeLessThan(wasmPeakModule().length);
    const peak = wasmPeakFunction(true);
    expect(peak(1)).toBe(12 * 0.5);
    expect(peak(3)).toBe(12 * 0.875);
  });

  it('measures a copy bandwidth above zero', () => {
    expect(copyBandwidthGbPerS(1, 2)).toBeGreaterThan(0);
  });
});
