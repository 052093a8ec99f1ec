import type { DType } from '../../dtype.js';
import type { Dense } from './kernels.js';
import { elementwiseProgram, type Launch, output, Params } from './program.js';

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

/**
 * Uniform values in [low, high): `low + span * u` in f32 with the multiply and the add rounded
 * separately, as `philoxUniform` defines it (a plain multiply then add, not `fma`, whose fusing
 * WGSL leaves to the driver). Normals are not drawn here: see [Note: normals on the host].
 */
export function randomUniformLaunch(
  out: Dense,
  seed: number,
  offset: number,
  low: number,
  high: number,
): Launch {
  const program = elementwiseProgram({
    name: 'randomUniform',
    key: '',
    inputs: [],
    out: out.dtype,
    body: `${PHILOX}
fn outv(i: u32) -> f32 {
  let r = philox_at(i);
  let scaled = pf(7u) * to_unit(r.x);
  return pf(6u) + scaled;
}`,
  });
  const params = new Params()
    .u(out.offset)
    .u(out.size)
    .u(offset % 2 ** 32)
    .u(Math.floor(offset / 2 ** 32))
    .u(seed % 2 ** 32)
    .u(Math.floor(seed / 2 ** 32))
    .f(low)
    .f(high - low);
  const dtypes: DType[] = [out.dtype];
  return {
    program,
    dtypes,
    bindings: [output(out, out.size)],
    params: params.toArray(),
    shape: [out.size],
    usesError: false,
  };
}
