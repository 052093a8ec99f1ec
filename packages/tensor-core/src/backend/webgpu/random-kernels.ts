import type { DType } from '../../dtype.js';
import type { Dense } from './kernels.js';
import { elementwiseCount, elementwiseProgram, type Launch, output, Params } from './program.js';

/**
 * Philox4x32-10 in WGSL, a port of `src/random/philox.ts`: key (seed low word, seed high word),
 * counter (offset + i as a 64-bit number in words 0-1, then 0, 0). WGSL has no 64-bit integers, so
 * the 32x32 -> 64 multiply is built from 16-bit halves.
 */
const PHILOX = /* wgsl */ `
fn mulhi(a: u32, b: u32) -> u32 {
  let a0 = a & 0xffffu;
  let a1 = a >> 16u;
  let b0 = b & 0xffffu;
  let b1 = b >> 16u;
  let p00 = a0 * b0;
  let p01 = a0 * b1;
  let p10 = a1 * b0;
  let p11 = a1 * b1;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  return p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
}
fn philox(c: vec4u, key: vec2u) -> vec4u {
  var x = c;
  var k = key;
  for (var r = 0u; r < 10u; r++) {
    let hi0 = mulhi(0xD2511F53u, x.x);
    let lo0 = 0xD2511F53u * x.x;
    let hi1 = mulhi(0xCD9E8D57u, x.z);
    let lo1 = 0xCD9E8D57u * x.z;
    x = vec4u(hi1 ^ x.y ^ k.x, lo1, hi0 ^ x.w ^ k.y, lo0);
    k = k + vec2u(0x9E3779B9u, 0xBB67AE85u);
  }
  return x;
}
fn philox_at(i: u32) -> vec4u {
  let lo = prm[2] + i;
  let hi = prm[3] + select(0u, 1u, lo < i);
  return philox(vec4u(lo, hi, 0u, 0u), vec2u(prm[4], prm[5]));
}
fn to_unit(x: u32) -> f32 { return f32(x >> 8u) * 5.9604644775390625e-8; }
`;

function randomLaunch(
  out: Dense,
  seed: number,
  offset: number,
  a: number,
  b: number,
  normal: boolean,
): Launch {
  const value = normal
    ? `let u1 = f32((r.x >> 8u) + 1u) * 5.9604644775390625e-8;
  let u2 = to_unit(r.y);
  return pf(6u) + pf(7u) * (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));`
    : 'return fma(pf(8u), to_unit(r.x), pf(6u));';
  const program = elementwiseProgram({
    name: normal ? 'randomNormal' : 'randomUniform',
    key: '',
    inputs: [],
    out: out.dtype,
    body: `${PHILOX}
fn outv(i: u32) -> f32 {
  let r = philox_at(i);
  ${value}
}`,
  });
  const params = new Params()
    .u(out.offset)
    .u(out.size)
    .u(offset % 2 ** 32)
    .u(Math.floor(offset / 2 ** 32))
    .u(seed % 2 ** 32)
    .u(Math.floor(seed / 2 ** 32))
    .f(a)
    .f(b)
    .f(b - a);
  const dtypes: DType[] = [out.dtype];
  return {
    program,
    dtypes,
    bindings: [output(out, out.size)],
    params: params.toArray(),
    shape: [elementwiseCount(out.dtype, out.offset, out.size)],
    usesError: false,
  };
}

export function randomUniformLaunch(
  out: Dense,
  seed: number,
  offset: number,
  low: number,
  high: number,
): Launch {
  return randomLaunch(out, seed, offset, low, high, false);
}

export function randomNormalLaunch(
  out: Dense,
  seed: number,
  offset: number,
  mean: number,
  std: number,
): Launch {
  return randomLaunch(out, seed, offset, mean, std, true);
}
