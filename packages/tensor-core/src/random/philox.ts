/**
 * [Note: counter-based random numbers]
 *
 * Every random op draws from Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", the Random123 library; also PyTorch's CUDA generator). Element i of a random tensor uses
 * key = the seed as two u32 words (lo, hi) and counter = [lo(offset + i), hi(offset + i), 0, 0], so
 * its value depends only on (seed, offset, i): the same on the CPU and WebGPU backends, on every
 * rank, whatever the dispatch shape. A `RandomGenerator` advances `offset` by each tensor's element count,
 * so consecutive draws never reuse a counter.
 *
 * These functions are the reference the WGSL kernels are ported from. The uniform value is
 * bit-identical on every backend: u = (x0 >>> 8) * 2^-24 is exact in f32, and the scaling is
 * defined as f32 arithmetic with two roundings, `f32(low) + f32(f32(high - low) * u)` (a WGSL
 * port must keep the multiply and the add separate, not fused into an fma; with low 0 and high 1
 * both roundings are exact). Only f64 outputs scale in double. The normal value is bit-identical
 * too, because every backend computes it with `philoxNormal` on the host: see
 * [Note: normals on the host].
 *
 * [Note: normals on the host]
 *
 * Box-Muller needs log and cos, and WGSL promises neither to the last bit (cos only to 2^-11
 * absolute, log to 2^-21), so a WGSL normal kernel differed from the CPU backend in most elements
 * (by up to about 1e-3 for std 1). Same seed and offset must give the same values on every backend
 * and rank, so the WebGPU backend does not draw normals on the device: it runs `philoxNormal` into
 * an f32 array on the host (the CPU backend's code; 16-bit outputs then encode with the integer
 * round-to-nearest-even of dtype-convert.ts, as CPU stores do) and uploads it. The cost is host
 * time, about 0.2 us per element on one core, plus one upload: fine for weight initialisation,
 * which is what normals are drawn for. Uniform values (dropout masks, every step) stay on the
 * device. ECMAScript does not require `Math.log` and `Math.cos` to be correctly rounded, but V8
 * computes them in software with code it bundles (fdlibm ports, glibc's sin/cos), not the
 * platform's libm, so processes on the same Node version (every rank of a job) agree; another
 * JavaScript engine may differ in the last bit.
 */

const M0 = 0xd2511f53;
const M1 = 0xcd9e8d57;
const W0 = 0x9e3779b9;
const W1 = 0xbb67ae85;
const TWO_POW_32 = 4294967296;
const TWO_POW_MINUS_24 = 2 ** -24;

/** High 32 bits of the 64-bit product of two u32 values, exact (16-bit limbs). */
export function mulHi32(a: number, b: number): number {
  const al = a & 0xffff;
  const ah = a >>> 16;
  const bl = b & 0xffff;
  const bh = b >>> 16;
  const lh = al * bh;
  const hl = ah * bl;
  const mid = ((al * bl) >>> 16) + (lh & 0xffff) + (hl & 0xffff);
  return (ah * bh + (lh >>> 16) + (hl >>> 16) + (mid >>> 16)) >>> 0;
}

/**
 * Philox4x32-10 of one counter block: writes the four output words into `out` (u32 values as
 * numbers). `counter` is 4 u32 words, `key` 2.
 */
export function philox4x32(
  c0: number,
  c1: number,
  c2: number,
  c3: number,
  k0: number,
  k1: number,
  out: Uint32Array,
): Uint32Array {
  let x0 = c0 >>> 0;
  let x1 = c1 >>> 0;
  let x2 = c2 >>> 0;
  let x3 = c3 >>> 0;
  let key0 = k0 >>> 0;
  let key1 = k1 >>> 0;
  for (let round = 0; round < 10; round++) {
    if (round > 0) {
      key0 = (key0 + W0) >>> 0;
      key1 = (key1 + W1) >>> 0;
    }
    const hi0 = mulHi32(M0, x0);
    const lo0 = Math.imul(M0, x0) >>> 0;
    const hi1 = mulHi32(M1, x2);
    const lo1 = Math.imul(M1, x2) >>> 0;
    x0 = (hi1 ^ x1 ^ key0) >>> 0;
    x1 = lo1;
    x2 = (hi0 ^ x3 ^ key1) >>> 0;
    x3 = lo0;
  }
  out[0] = x0;
  out[1] = x1;
  out[2] = x2;
  out[3] = x3;
  return out;
}

/** The (lo, hi) u32 words of a non-negative integer below 2^53. */
export function splitU64(value: number): [number, number] {
  return [(value % TWO_POW_32) >>> 0, Math.floor(value / TWO_POW_32) >>> 0];
}

/** True for a seed or offset Philox accepts: an integer in [0, 2^53). */
export function isValidCounter(value: number): boolean {
  return Number.isSafeInteger(value) && value >= 0;
}

/**
 * Fills `out` with uniform values in [low, high): element i is `low + (high - low) * u` with
 * u = (x0 >>> 8) * 2^-24, x0 the first Philox word of counter `offset + i`. With precision 'f32'
 * (the default, and what f32/f16/bf16 tensors use) the scaling is f32 arithmetic, rounded after
 * the multiply and after the add, exactly as the WGSL kernel computes it; with 'f64' it is double.
 */
export function philoxUniform(
  out: { length: number; [i: number]: number },
  seed: number,
  offset: number,
  low = 0,
  high = 1,
  precision: 'f32' | 'f64' = 'f32',
): void {
  const [k0, k1] = splitU64(seed);
  const words = new Uint32Array(4);
  const f32 = precision === 'f32';
  const lo = f32 ? Math.fround(low) : low;
  const span = f32 ? Math.fround(high - low) : high - low;
  for (let i = 0; i < out.length; i++) {
    const [c0, c1] = splitU64(offset + i);
    philox4x32(c0, c1, 0, 0, k0, k1, words);
    const u = (words[0]! >>> 8) * TWO_POW_MINUS_24;
    out[i] = f32 ? Math.fround(lo + Math.fround(span * u)) : lo + span * u;
  }
}

/**
 * Fills `out` with normal values by Box-Muller on the first two Philox words of counter
 * `offset + i`: u1 = ((x0 >>> 8) + 1) * 2^-24 in (0, 1], u2 = (x1 >>> 8) * 2^-24,
 * z = sqrt(-2 ln u1) cos(2 pi u2), value = mean + std * z.
 */
export function philoxNormal(
  out: { length: number; [i: number]: number },
  seed: number,
  offset: number,
  mean = 0,
  std = 1,
): void {
  const [k0, k1] = splitU64(seed);
  const words = new Uint32Array(4);
  for (let i = 0; i < out.length; i++) {
    const [c0, c1] = splitU64(offset + i);
    philox4x32(c0, c1, 0, 0, k0, k1, words);
    const u1 = ((words[0]! >>> 8) + 1) * TWO_POW_MINUS_24;
    const u2 = (words[1]! >>> 8) * TWO_POW_MINUS_24;
    out[i] = mean + std * Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
  }
}
