import type { DType } from '../../dtype.js';
import type { Dense } from './kernels.js';
import { input, type Launch, output, Params, type Program } from './program.js';
import {
  type RegisterTiling,
  registerTiledWgsl,
  tilingKey,
  type VectorLoads,
  workgroupTile,
} from './matmul-tiled-wgsl.js';
import { CONVERT, declare, loader, paramsDecl } from './wgsl.js';

/**
 * [Note: two matmul kernels]
 *
 * SwiftShader runs a workgroup as SIMD lanes on a CPU core; barriers and shared memory are costly
 * there, while registers are plentiful. So on CPU adapters each invocation computes an 8x8 output
 * tile in 16 named vec4 accumulators, fully unrolled, reading A and B straight from storage with no
 * shared memory and no barriers (ANCHORS.md: 3x the shared-memory kernel on SwiftShader). Loads
 * clamp their row and column to the matrix (kernels stay in bounds without Dawn's robustness) and
 * stores are guarded, so any M, N, K work. The k loop is unrolled by 4 with a scalar tail.
 *
 * On real GPUs the classic kernel wins: a 64x64 output tile per 16x16 workgroup, 16-deep slices of
 * A and B staged in workgroup memory, 4x4 outputs per invocation. The backend picks per adapter
 * (`isCpuAdapter`); `WEBSHARD_MATMUL=tiled|shared` overrides it.
 *
 * Params: [M, N, K, aOffset, bOffset, outOffset, aBatchStride, bBatchStride]; the batch is the z
 * workgroup index (a batch stride of 0 broadcasts an operand of batch 1).
 */
export type MatmulKernel = 'registerTiled' | 'sharedMemory';

/**
 * A second register tiling for the calls whose A is read as vec4 and for every strided call, with
 * A's loads shared across a subgroup of `subgroupSize` lanes ([Note: A's rows shared across a
 * subgroup]): a workgroup is one subgroup (`workgroup` [subgroupSize, 1]) and `tileM` a multiple
 * of it. Used only where the device has the `subgroups` feature and the adapter's subgroups are
 * always this size (`usableTuning`).
 */
export type SubgroupTiling = RegisterTiling & { readonly subgroupSize: number };

/** Which kernel a backend runs, with the register tiling where it is the register-tiled one. */
export type MatmulTuning =
  | { readonly kernel: 'sharedMemory' }
  | ({
      readonly kernel: 'registerTiled';
      readonly vectorLoads?: boolean;
      readonly subgroupTiling?: SubgroupTiling;
    } & RegisterTiling);

function indexExprs(transposeA: boolean, transposeB: boolean) {
  return {
    a: (m: string, k: string) => (transposeA ? `aBase + (${k}) * M + ${m}` : `${m} * K + (${k})`),
    b: (k: string, n: string) => (transposeB ? `${n} * K + (${k})` : `bBase + (${k}) * N + ${n}`),
  };
}

function sharedMemoryWgsl(a: DType, b: DType, transposeA: boolean, transposeB: boolean): string {
  const ix = indexExprs(transposeA, transposeB);
  // Thread e of 256 loads 4 elements of each 16x64 slice; the mapping follows the contiguous axis.
  const aMap = transposeA
    ? 'let kk = e / 64u; let mm = e % 64u;'
    : 'let mm = e / 16u; let kk = e % 16u;';
  const bMap = transposeB
    ? 'let nn = e / 16u; let kk = e % 16u;'
    : 'let kk = e / 64u; let nn = e % 64u;';
  const aIdx = transposeA ? ix.a('gm', 'gk') : `aBase + ${ix.a('gm', 'gk')}`;
  const bIdx = transposeB ? `bBase + ${ix.b('gk', 'gn')}` : ix.b('gk', 'gn');
  return `${CONVERT}
${declare(0, 'A', a, 'read')}
${loader('A', a)}
${declare(1, 'B', b, 'read')}
${loader('B', b)}
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
${paramsDecl(3)}
var<workgroup> As: array<f32, 1024>;
var<workgroup> Bs: array<f32, 1024>;
@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) l: vec3u, @builtin(workgroup_id) w: vec3u) {
  let M = prm[0];
  let N = prm[1];
  let K = prm[2];
  let aBase = prm[3] + w.z * prm[6];
  let bBase = prm[4] + w.z * prm[7];
  let tid = l.y * 16u + l.x;
  let m0 = w.y * 64u;
  let n0 = w.x * 64u;
  var acc0 = vec4f(0.0);
  var acc1 = vec4f(0.0);
  var acc2 = vec4f(0.0);
  var acc3 = vec4f(0.0);
  for (var k0 = 0u; k0 < K; k0 += 16u) {
    for (var q = 0u; q < 4u; q++) {
      let e = tid + q * 256u;
      {
        ${aMap}
        let gm = min(m0 + mm, M - 1u);
        let gk = min(k0 + kk, K - 1u);
        As[kk * 64u + mm] = select(0.0, ld_A(${aIdx}), m0 + mm < M && k0 + kk < K);
      }
      {
        ${bMap}
        let gn = min(n0 + nn, N - 1u);
        let gk = min(k0 + kk, K - 1u);
        Bs[kk * 64u + nn] = select(0.0, ld_B(${bIdx}), n0 + nn < N && k0 + kk < K);
      }
    }
    workgroupBarrier();
    for (var kk = 0u; kk < 16u; kk++) {
      let ab = kk * 64u + l.y * 4u;
      let bb = kk * 64u + l.x * 4u;
      let av = vec4f(As[ab], As[ab + 1u], As[ab + 2u], As[ab + 3u]);
      let bv = vec4f(Bs[bb], Bs[bb + 1u], Bs[bb + 2u], Bs[bb + 3u]);
      acc0 = acc0 + av.x * bv;
      acc1 = acc1 + av.y * bv;
      acc2 = acc2 + av.z * bv;
      acc3 = acc3 + av.w * bv;
    }
    workgroupBarrier();
  }
  let cBase = prm[5] + w.z * M * N;
  let accs = array<vec4f, 4>(acc0, acc1, acc2, acc3);
  for (var r = 0u; r < 4u; r++) {
    let row = m0 + l.y * 4u + r;
    if (row < M) {
      for (var c = 0u; c < 4u; c++) {
        let col = n0 + l.x * 4u + c;
        if (col < N) { C[cBase + row * N + col] = accs[r][c]; }
      }
    }
  }
}`;
}

const NO_VECTORS: VectorLoads = { a: false, b: false };

/**
 * Which operands this call can read as vec4 (`VectorLoads`): f32, the runs along the
 * contiguous axis of every batch element starting at a multiple of 4 floats (so that axis's
 * length a multiple of 4, and the offset too); a transposed A four rows at a time, so a `tileM`
 * that is a multiple of 4.
 */
function vectorLoads(
  a: Dense,
  b: Dense,
  transposeA: boolean,
  transposeB: boolean,
  s: MatmulShape,
  tileM: number,
): VectorLoads {
  const aRun = transposeA ? s.m % 4 === 0 && tileM % 4 === 0 : s.k % 4 === 0;
  const bRun = transposeB ? s.k % 4 === 0 : s.n % 4 === 0;
  return {
    a: a.dtype === 'f32' && aRun && a.offset % 4 === 0,
    b: b.dtype === 'f32' && bRun && b.offset % 4 === 0,
  };
}

/** The tiling and loads of one call: the subgroup tiling where A is read as vec4. */
function callTiling(
  tuning: MatmulTuning & { kernel: 'registerTiled' },
  a: Dense,
  b: Dense,
  transposeA: boolean,
  transposeB: boolean,
  s: MatmulShape,
): { tiling: RegisterTiling; vec: VectorLoads } {
  if (!tuning.vectorLoads) return { tiling: tuning, vec: NO_VECTORS };
  const sub = tuning.subgroupTiling;
  if (sub !== undefined) {
    const vec = vectorLoads(a, b, transposeA, transposeB, s, sub.tileM);
    if (vec.a) return { tiling: sub, vec: { ...vec, shareA: sub.subgroupSize } };
  }
  return { tiling: tuning, vec: vectorLoads(a, b, transposeA, transposeB, s, tuning.tileM) };
}

export interface MatmulShape {
  batch: number;
  m: number;
  n: number;
  k: number;
  aBatch: number;
  bBatch: number;
}

/** out (f32, contiguous [batch, M, N]) = A x B. */
export function matmulLaunch(
  tuning: MatmulTuning,
  a: Dense,
  b: Dense,
  out: Dense,
  transposeA: boolean,
  transposeB: boolean,
  s: MatmulShape,
): Launch {
  let program: Program;
  if (tuning.kernel === 'registerTiled') {
    const { tiling, vec } = callTiling(tuning, a, b, transposeA, transposeB, s);
    const [rowsPerGroup, colsPerGroup] = workgroupTile(tiling);
    program = {
      name: 'matmul',
      key: `matmul:tiled:${tilingKey(tiling)}:${a.dtype}:${b.dtype}:${transposeA}:${transposeB}:${vec.a}:${vec.b}:sg${vec.shareA ?? 0}`,
      workgroupSize: [tiling.workgroup[0], tiling.workgroup[1], 1],
      dispatch: (sh) => [
        Math.ceil((sh[1] ?? 1) / colsPerGroup),
        Math.ceil((sh[0] ?? 1) / rowsPerGroup),
        sh[2] ?? 1,
      ],
      wgsl: () => registerTiledWgsl(a.dtype, b.dtype, transposeA, transposeB, tiling, vec),
    };
  } else {
    program = {
      name: 'matmul',
      key: `matmul:shared:${a.dtype}:${b.dtype}:${transposeA}:${transposeB}`,
      workgroupSize: [16, 16, 1],
      dispatch: (sh) => [Math.ceil((sh[1] ?? 1) / 64), Math.ceil((sh[0] ?? 1) / 64), sh[2] ?? 1],
      wgsl: () => sharedMemoryWgsl(a.dtype, b.dtype, transposeA, transposeB),
    };
  }
  const params = new Params()
    .u(s.m)
    .u(s.n)
    .u(s.k)
    .u(a.offset)
    .u(b.offset)
    .u(out.offset)
    .u(s.aBatch === 1 ? 0 : s.m * s.k)
    .u(s.bBatch === 1 ? 0 : s.k * s.n);
  return {
    program,
    dtypes: [a.dtype, b.dtype, 'f32'],
    bindings: [input(a, a.size), input(b, b.size), output(out, out.size)],
    params: params.toArray(),
    shape: [s.m, s.n, s.batch],
    usesError: false,
  };
}
