import { enableRelaxedSimd } from '#platform';
import type { WasmApi } from './matmul-wasm-load.js';

/**
 * [Note: relaxed FMA, chosen once per job]
 * Relaxed SIMD's `f32x4.relaxed_madd` is the WASM matmul's fused multiply-add ([Note: the WASM
 * SIMD matmul]): one instruction where the plain kernel issues a multiply and an add, 41 against
 * 29 GFLOP/s in one run here, and one rounding instead of two. "Relaxed" means the engine may fuse
 * or not: x64 with FMA3 and arm64 fuse, older x64 rounds twice, and an engine without relaxed SIMD
 * cannot run the module at all. So the same model computes different last bits on different
 * engines. `relaxedFmaSupport()` finds out which one this engine is, by computing a x b + c where
 * the product's last bits decide the answer: (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24 fused and 0
 * rounded twice. In Node 20 it first sets V8's relaxed-SIMD flag (`enableRelaxedSimd` in
 * `#platform`); Node 22 and Chromium have relaxed SIMD without one. The trainer asks every rank
 * and turns the fused kernel on only where all of them answer `'fused'`, so every rank of a job
 * computes the same bits, and prints the choice on its `backend:` line; a library user who wants
 * the same passes `matmulFma: 'auto'` to `createCpuBackend` or `createBackend`.
 */

/** What an engine does with relaxed SIMD's multiply-add. */
export type FmaSupport = 'fused' | 'unfused' | 'none';

/** (func (export "probe") (param f32 f32 f32) (result f32)): lane 0 of relaxed_madd(a, b, c). */
// biome-ignore format: the module's bytes, grouped by section
const PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // header
  0x01, 0x08, 0x01, 0x60, 0x03, 0x7d, 0x7d, 0x7d, 0x01, 0x7d, // type: (f32 f32 f32) -> f32
  0x03, 0x02, 0x01, 0x00, // one function of type 0
  0x07, 0x09, 0x01, 0x05, 0x70, 0x72, 0x6f, 0x62, 0x65, 0x00, 0x00, // export "probe"
  0x0a, 0x16, 0x01, 0x14, 0x00, // code: one body of 20 bytes, no locals
  0x20, 0x00, 0xfd, 0x13, 0x20, 0x01, 0xfd, 0x13, 0x20, 0x02, 0xfd, 0x13, // f32x4.splat each
  0xfd, 0x85, 0x02, // f32x4.relaxed_madd
  0xfd, 0x1f, 0x00, // f32x4.extract_lane 0
  0x0b,
]);

let cached: FmaSupport | undefined;

/**
 * Whether this engine runs relaxed SIMD's multiply-add, and fused (one rounding) or not; `'none'`
 * where it cannot validate relaxed SIMD or has no WebAssembly. See [Note: relaxed FMA, chosen once
 * per job].
 */
export function relaxedFmaSupport(
  wasm: WasmApi | null = globalThis.WebAssembly ?? null,
): FmaSupport {
  const useCache = wasm === (globalThis.WebAssembly ?? null);
  if (useCache && cached !== undefined) return cached;
  let answer: FmaSupport = 'none';
  if (wasm !== null) {
    enableRelaxedSimd();
    if (wasm.validate(PROBE)) {
      const instance = new wasm.Instance(new wasm.Module(PROBE), {});
      const probe = instance.exports.probe as (a: number, b: number, c: number) => number;
      const a = 1 + 2 ** -12;
      answer = probe(a, a, -(1 + 2 ** -11)) === 2 ** -24 ? 'fused' : 'unfused';
    }
  }
  if (useCache) cached = answer;
  return answer;
}
