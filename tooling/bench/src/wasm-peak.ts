import { setFlagsFromString } from 'node:v8';

/*
 * The WebAssembly SIMD arithmetic ceiling of one thread: a loop of 12 independent f32x4 chains,
 * each `acc = acc * m + m` as a multiply and an add (WebAssembly SIMD128 has no fused multiply-add
 * without relaxed SIMD), all in registers, so nothing but the multiply and add units bounds it: 96
 * FLOPs a trip. 12 chains hide the 8 cycles of a multiply then an add and, with `m`, fit x64's 16
 * vector registers (16 chains spilled: 17 GFLOP/s against 31 on the same machine; 8 chains 24). The matmul's inner loop is the same two instructions, so this is what its one thread
 * can reach at most, measured as adapter-peak.ts measures a WebGPU adapter's. The module is a few
 * dozen bytes written here, so no assembler is needed.
 */

const CHAINS = 12;
const M = CHAINS + 1;

function leb(value: number): number[] {
  const out: number[] = [];
  let v = value;
  do {
    let byte = v & 0x7f;
    v >>>= 7;
    if (v !== 0) byte |= 0x80;
    out.push(byte);
  } while (v !== 0);
  return out;
}

function section(id: number, content: number[]): number[] {
  return [id, ...leb(content.length), ...content];
}

/**
 * The module's bytes: `peak(trips: i32) -> f32`, the sum of the chains' first lanes. With `fma`,
 * each chain is one relaxed SIMD multiply-add (`acc = relaxed_madd(acc, m, m)`) instead of a
 * multiply and an add: the ceiling of the fused matmul ([Note: relaxed FMA, chosen once per job]
 * in tensor-core), the same FLOPs a trip in half the instructions. Node 20 validates it only with
 * V8's relaxed-SIMD flag set (tensor-core's `relaxedFmaSupport()` sets it).
 */
export function wasmPeakModule(fma = false): Uint8Array<ArrayBuffer> {
  const get = (i: number) => [0x20, ...leb(i)];
  const set = (i: number) => [0x21, ...leb(i)];
  const body: number[] = [0x01, CHAINS + 1, 0x7b]; // locals: CHAINS + 1 v128, zeroed
  body.push(0x43, 0x00, 0x00, 0x00, 0x3f, 0xfd, 0x13, ...set(M)); // m = f32x4.splat(0.5)
  body.push(0x03, 0x40); // loop
  for (let i = 1; i <= CHAINS; i++) {
    if (fma) {
      // acc_i = f32x4.relaxed_madd(acc_i, m, m)
      body.push(...get(i), ...get(M), ...get(M), 0xfd, 0x85, 0x02, ...set(i));
    } else {
      // acc_i = f32x4.add(f32x4.mul(acc_i, m), m)
      body.push(...get(i), ...get(M), 0xfd, 0xe6, 0x01, ...get(M), 0xfd, 0xe4, 0x01, ...set(i));
    }
  }
  // trips -= 1; continue while trips != 0
  body.push(...get(0), 0x41, 0x01, 0x6b, 0x22, 0x00, 0x0d, 0x00, 0x0b);
  body.push(...get(1), 0xfd, 0x1f, 0x00); // f32x4.extract_lane 0
  for (let i = 2; i <= CHAINS; i++) body.push(...get(i), 0xfd, 0x1f, 0x00, 0x92); // f32.add
  body.push(0x0b);
  const name = [...'peak'].map((c) => c.charCodeAt(0));
  return new Uint8Array([
    0x00,
    0x61,
    0x73,
    0x6d,
    0x01,
    0x00,
    0x00,
    0x00,
    ...section(1, [0x01, 0x60, 0x01, 0x7f, 0x01, 0x7d]), // type: (i32) -> f32
    ...section(3, [0x01, 0x00]), // one function of type 0
    ...section(7, [0x01, name.length, ...name, 0x00, 0x00]), // export "peak"
    ...section(10, [0x01, ...leb(body.length), ...body]),
  ]);
}

/** FLOPs of one trip of the loop: a multiply and an add on 4 lanes, per chain. */
export const PEAK_FLOPS_PER_TRIP = CHAINS * 2 * 4;

/** Sets V8's relaxed-SIMD flag (Node 20 validates relaxed SIMD only with it; later ones ignore it). */
export function enableRelaxedSimd(): void {
  setFlagsFromString('--experimental-wasm-relaxed-simd');
}

/** `peak(trips)` of a fresh instance (`fma`: the multiply-add loop). */
export function wasmPeakFunction(fma = false): (trips: number) => number {
  if (fma) enableRelaxedSimd();
  const module = new WebAssembly.Module(wasmPeakModule(fma));
  const instance = new WebAssembly.Instance(module);
  return instance.exports.peak as (trips: number) => number;
}

/**
 * One thread's WebAssembly SIMD f32 ceiling in GFLOP/s: the best of `rounds` calls of about
 * `callMs` each (the best, since a shared machine only ever slows it). `fma`: the ceiling of
 * relaxed SIMD's multiply-add, for a matmul that uses it.
 */
export function wasmSimdPeakGflops(rounds = 7, callMs = 60, fma = false): number {
  const peak = wasmPeakFunction(fma);
  peak(1000); // compile the optimized tier's code before timing
  let trips = 1 << 16;
  for (;;) {
    const t0 = performance.now();
    peak(trips);
    if (performance.now() - t0 > callMs / 4 || trips > 1 << 30) break;
    trips *= 2;
  }
  let best = 0;
  for (let round = 0; round < rounds; round++) {
    const t0 = performance.now();
    peak(trips);
    const seconds = (performance.now() - t0) / 1000;
    best = Math.max(best, (trips * PEAK_FLOPS_PER_TRIP) / seconds / 1e9);
  }
  return best;
}

/**
 * Memory bandwidth in GB/s as the step profile counts bytes (read plus written): the best of
 * `rounds` copies of `mib` MiB with `TypedArray.set`.
 */
export function copyBandwidthGbPerS(mib = 64, rounds = 7): number {
  const from = new Uint8Array(mib << 20).fill(1);
  const to = new Uint8Array(mib << 20).fill(0);
  let best = 0;
  for (let round = 0; round < rounds; round++) {
    const t0 = performance.now();
    to.set(from);
    const seconds = (performance.now() - t0) / 1000;
    best = Math.max(best, (2 * (mib << 20)) / seconds / 1e9);
  }
  return best;
}
