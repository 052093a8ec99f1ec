import type { DType } from '../../dtype.js';

/**
 * [Note: packed 16-bit storage]
 *
 * f16 and bf16 live two per u32 word: element e is the (e & 1) half of word e >> 1 (low half
 * first, as a little-endian Uint16Array on the host sees it). Kernels read them with integer
 * decoding and write them with integer round-to-nearest-even (`f32_to_f16`, `f32_to_bf16`), ported
 * line by line from `src/dtype-convert.ts`, so results are bit-identical to the CPU backend
 * (SwiftShader's `pack2x16float` flushes subnormals to zero).
 *
 * Writes never clobber elements outside the output's [offset, offset + size) range, so views at odd
 * element offsets inside one flat buffer are safe:
 * - element-wise kernels (one output element per logical index) run one invocation per *word*: the
 *   invocation computes both halves that belong to the output and copies the halves that don't;
 * - kernels that write scattered elements (rows of softmax and layer norm, strided copies, columns of
 *   scatterAdd) store a half with `atomicAnd` then `atomicOr` on the word, which never disturbs the
 *   other half, whoever writes it.
 */
export type Access = 'read' | 'read_write' | 'atomic';

/**
 * [Note: native f16 storage]
 *
 * Where the device has `shader-f16` (lavapipe, real GPUs; not SwiftShader), f16 tensors are
 * `array<f16>`: one element per index, no packing, so element-wise kernels run one invocation per
 * element and scattered stores are plain stores instead of `atomicAnd`/`atomicOr` pairs. The bytes
 * are the same as packed storage, so a buffer means the same thing either way. Values still cross
 * between f16 and f32 with the integer code of `CONVERT` (an f16 moves through `bitcast` as the
 * low half of a `vec2<f16>`), never with WGSL's `f16(x)` / `f32(h)`: those may flush subnormals or
 * round differently per driver, and results must stay bit-identical to the CPU backend and to
 * ranks on other adapters. bf16 has no WGSL type and is always packed.
 *
 * Which layout a kernel is generated for is the backend's choice, made once per device
 * (`WebGpuBackendOptions.f16`; by default native only on GPUs, see `f16Layout`). The helpers below
 * read it from `currentTarget`, which only `withTarget` sets, around the backend queue's calls to
 * a program's `wgsl` and `dispatch`; kernel builders never see it, so each stays one template for
 * both layouts.
 */
export interface WgslTarget {
  /** f16 tensors are `array<f16>` (see [Note: native f16 storage]). */
  readonly nativeF16: boolean;
}

export const PACKED_TARGET: WgslTarget = { nativeF16: false };

let currentTarget: WgslTarget = PACKED_TARGET;

/** Runs `fn` (WGSL generation or a dispatch computation) for `target`. */
export function withTarget<T>(target: WgslTarget, fn: () => T): T {
  const previous = currentTarget;
  currentTarget = target;
  try {
    return fn();
  } finally {
    currentTarget = previous;
  }
}

/** The module preamble a target needs: `enable f16;` where f16 is native. */
export function preamble(target: WgslTarget): string {
  return target.nativeF16 ? 'enable f16;\n' : '';
}

function nativeHalf(dtype: DType): boolean {
  return dtype === 'f16' && currentTarget.nativeF16;
}

/** The WGSL element type a dtype's storage array uses. */
export function storageType(dtype: DType): 'f32' | 'i32' | 'u32' | 'f16' {
  if (dtype === 'f32') return 'f32';
  if (dtype === 'i32') return 'i32';
  if (nativeHalf(dtype)) return 'f16';
  return 'u32';
}

/**
 * Whether a dtype is stored two per u32 word in the current target ([Note: packed 16-bit storage]).
 */
export function is16(dtype: DType): boolean {
  return dtype === 'bf16' || (dtype === 'f16' && !currentTarget.nativeF16);
}

/** The WGSL type kernels compute in for a dtype: f32 for floats, i32 for i32. */
export function valueType(dtype: DType): 'f32' | 'i32' {
  return dtype === 'i32' ? 'i32' : 'f32';
}

/** A storage binding declaration. */
export function declare(binding: number, name: string, dtype: DType, access: Access): string {
  if (access === 'atomic' && is16(dtype)) {
    return `@group(0) @binding(${binding}) var<storage, read_write> ${name}: array<atomic<u32>>;`;
  }
  const mode = access === 'atomic' ? 'read_write' : access;
  return `@group(0) @binding(${binding}) var<storage, ${mode}> ${name}: array<${storageType(dtype)}>;`;
}

/** `fn ld_NAME(i: u32) -> f32|i32`: the element at absolute index i, decoded to the compute type. */
export function loader(name: string, dtype: DType): string {
  if (nativeHalf(dtype)) {
    return `fn ld_${name}(i: u32) -> f32 { return f16_to_f32(bitcast<u32>(vec2<f16>(${name}[i], 0.0h))); }`;
  }
  switch (dtype) {
    case 'f32':
    case 'i32':
      return `fn ld_${name}(i: u32) -> ${dtype} { return ${name}[i]; }`;
    case 'f16':
      return `fn ld_${name}(i: u32) -> f32 { return f16_to_f32((${name}[i >> 1u] >> ((i & 1u) << 4u)) & 0xffffu); }`;
    case 'bf16':
      return `fn ld_${name}(i: u32) -> f32 { return bitcast<f32>(((${name}[i >> 1u] >> ((i & 1u) << 4u)) & 0xffffu) << 16u); }`;
    default:
      throw new Error(`no WGSL loader for ${dtype}`);
  }
}

/** `fn raw_NAME(i: u32) -> u32`: the raw bits of an element (a half for 16-bit dtypes). */
export function rawLoader(name: string, dtype: DType): string {
  if (nativeHalf(dtype)) {
    return `fn raw_${name}(i: u32) -> u32 { return bitcast<u32>(vec2<f16>(${name}[i], 0.0h)); }`;
  }
  if (is16(dtype)) {
    return `fn raw_${name}(i: u32) -> u32 { return (${name}[i >> 1u] >> ((i & 1u) << 4u)) & 0xffffu; }`;
  }
  return `fn raw_${name}(i: u32) -> u32 { return bitcast<u32>(${name}[i]); }`;
}

/**
 * WGSL expression converting a compute value `v` (f32, or i32 for i32) to the stored form: the
 * element for f32 and i32 and native f16, a u32 half for packed 16-bit dtypes.
 */
export function encode(dtype: DType, v: string): string {
  if (nativeHalf(dtype)) return fromBits(dtype, `f32_to_f16(${v})`);
  switch (dtype) {
    case 'f32':
    case 'i32':
      return v;
    case 'f16':
      return `f32_to_f16(${v})`;
    case 'bf16':
      return `f32_to_bf16(${v})`;
    default:
      throw new Error(`no WGSL encoder for ${dtype}`);
  }
}

/** WGSL expression turning raw bits `bits` (u32; a half in its low 16 bits) into the stored form. */
export function fromBits(dtype: DType, bits: string): string {
  if (nativeHalf(dtype)) return `bitcast<vec2<f16>>(${bits}).x`;
  if (dtype === 'f32') return `bitcast<f32>(${bits})`;
  if (dtype === 'i32') return `bitcast<i32>(${bits})`;
  return bits;
}

/**
 * `fn st_NAME(i: u32, v: f32|i32)`: store one element at absolute index i, and `rst_NAME(i, bits)`
 * to store raw bits. Packed 16-bit outputs must be declared `storeAccess(dtype)` (atomic; see
 * [Note: packed 16-bit storage]).
 */
export function storer(name: string, dtype: DType): string {
  if (is16(dtype)) {
    return `fn rst_${name}(i: u32, h: u32) {
  let sh = (i & 1u) << 4u;
  atomicAnd(&${name}[i >> 1u], ~(0xffffu << sh));
  atomicOr(&${name}[i >> 1u], h << sh);
}
fn st_${name}(i: u32, v: f32) { rst_${name}(i, ${encode(dtype, 'v')}); }`;
  }
  return `fn rst_${name}(i: u32, h: u32) { ${name}[i] = ${fromBits(dtype, 'h')}; }
fn st_${name}(i: u32, v: ${valueType(dtype)}) { ${name}[i] = ${encode(dtype, 'v')}; }`;
}

/** The access a scattered-store output needs (atomic for packed halves). */
export function storeAccess(dtype: DType): Access {
  return is16(dtype) ? 'atomic' : 'read_write';
}

/**
 * Integer conversions, bit-identical to src/dtype-convert.ts; `f32_to_i32` and `i32_to_f32` follow
 * [Note: cast semantics] there.
 */
export const CONVERT = /* wgsl */ `
fn f32_to_f16(v: f32) -> u32 {
  let bits = bitcast<u32>(v);
  let sign = (bits >> 16u) & 0x8000u;
  let ex = i32((bits >> 23u) & 0xffu);
  var mant = bits & 0x7fffffu;
  if (ex == 255) { return sign | 0x7c00u | select(0u, 0x200u, mant != 0u); }
  let e = ex - 112;
  if (e >= 31) { return sign | 0x7c00u; }
  if (e <= 0) {
    if (e < -10) { return sign; }
    mant = mant | 0x800000u;
    let shift = u32(14 - e);
    let half = mant >> shift;
    let rem = mant & ((1u << shift) - 1u);
    let halfway = 1u << (shift - 1u);
    let up = rem > halfway || (rem == halfway && (half & 1u) == 1u);
    return sign | (half + select(0u, 1u, up));
  }
  let half = (u32(e) << 10u) | (mant >> 13u);
  let rem = mant & 0x1fffu;
  let up = rem > 0x1000u || (rem == 0x1000u && (half & 1u) == 1u);
  return sign | (half + select(0u, 1u, up));
}
fn f32_to_bf16(v: f32) -> u32 {
  let bits = bitcast<u32>(v);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0u) {
    return ((bits >> 16u) | 0x40u) & 0xffffu;
  }
  let lsb = (bits >> 16u) & 1u;
  return ((bits + 0x7fffu + lsb) >> 16u) & 0xffffu;
}
fn f32_to_i32(v: f32) -> i32 {
  let bits = bitcast<u32>(v);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0u) { return 0; }
  if (v >= 2147483648.0) { return 2147483647; }
  if (v <= -2147483648.0) { return -2147483647 - 1; }
  return i32(v);
}
fn i32_to_f32(v: i32) -> f32 {
  let neg = v < 0;
  let b = bitcast<u32>(v);
  let a = select(b, 0u - b, neg);
  if (a < 0x1000000u) { return f32(v); }
  let shift = 8u - countLeadingZeros(a);
  var m = a >> shift;
  let rem = a & ((1u << shift) - 1u);
  let halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (m & 1u) == 1u)) { m = m + 1u; }
  let mag = ldexp(f32(m), i32(shift));
  return select(mag, -mag, neg);
}
fn f16_to_f32(h: u32) -> f32 {
  let sign = (h & 0x8000u) << 16u;
  let ex = (h >> 10u) & 0x1fu;
  let mant = h & 0x3ffu;
  if (ex == 0u) { return bitcast<f32>(sign | bitcast<u32>(f32(mant) * 5.9604644775390625e-8)); }
  if (ex == 31u) { return bitcast<f32>(sign | 0x7f800000u | (mant << 13u)); }
  return bitcast<f32>(sign | ((ex + 112u) << 23u) | (mant << 13u));
}
`;

/** Parameters: a read-only u32 array, with typed accessors. */
export function paramsDecl(binding: number): string {
  return `@group(0) @binding(${binding}) var<storage, read> prm: array<u32>;
fn pf(k: u32) -> f32 { return bitcast<f32>(prm[k]); }
fn pi(k: u32) -> i32 { return bitcast<i32>(prm[k]); }`;
}

/** The deferred-error flag: [op code, bad index, bound]; see [Note: deferred index errors]. */
export function errorDecl(binding: number): string {
  return `@group(0) @binding(${binding}) var<storage, read_write> err: array<atomic<u32>>;
fn raise(code: u32, index: i32, bound: u32) {
  atomicStore(&err[0], code);
  atomicStore(&err[1], bitcast<u32>(index));
  atomicStore(&err[2], bound);
}`;
}

/** Linear invocation index over a 2-D dispatch of 1-D workgroups of size `wg`. */
export function linearIndex(wg: number): string {
  return `g.x + g.y * n.x * ${wg}u`;
}

/** Math helpers the float kernels share. */
export const MATH = /* wgsl */ `
fn erf_approx(x: f32) -> f32 {
  let a = abs(x);
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
  return select(y, -y, x < 0.0);
}
fn tanh_safe(x: f32) -> f32 {
  let c = clamp(x, -15.0, 15.0);
  let e = exp(2.0 * c);
  return (e - 1.0) / (e + 1.0);
}
fn gelu(x: f32) -> f32 { return 0.5 * x * (1.0 + erf_approx(x * 0.70710678118654752)); }
fn gelu_tanh(x: f32) -> f32 {
  return 0.5 * x * (1.0 + tanh_safe(0.79788456080286536 * (x + 0.044715 * x * x * x)));
}
fn gelu_grad(x: f32) -> f32 {
  return 0.5 * (1.0 + erf_approx(x * 0.70710678118654752)) + x * exp(-0.5 * x * x) * 0.39894228040143268;
}
fn gelu_tanh_grad(x: f32) -> f32 {
  let u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
  let t = tanh_safe(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.79788456080286536 * (1.0 + 3.0 * 0.044715 * x * x);
}
fn is_nan(x: f32) -> bool { let b = bitcast<u32>(x); return (b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu) != 0u; }
fn bits_f32(b: u32) -> f32 { var v = b; return bitcast<f32>(v); }
fn pow_real(x: f32, y: f32) -> f32 {
  if (y == 0.0) { return 1.0; }
  if (x == 0.0) { return select(0.0, bits_f32(0x7f800000u), y < 0.0); }
  if (x > 0.0) { return exp2(y * log2(x)); }
  if (y != trunc(y)) { return bits_f32(0x7fc00000u); }
  let m = exp2(y * log2(-x));
  let odd = abs(y) < 16777216.0 && (i32(y) & 1) == 1;
  return select(m, -m, odd);
}
`;
