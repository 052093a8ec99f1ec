import type { DType } from '../../dtype.js';
import { CONVERT, declare, loader, paramsDecl } from './wgsl.js';

/**
 * The shape of the register-tiled matmul kernel ([Note: two matmul kernels]): what one invocation
 * and one workgroup compute. Chosen per adapter by `matmulTuningFor` ([Note: matmul tuning per
 * adapter]).
 */
export interface RegisterTiling {
  /** Rows of C per invocation. */
  readonly tileM: number;
  /** Columns of C per invocation: a multiple of 4 (held as vec4 accumulators). */
  readonly tileN: number;
  /** Invocations per workgroup along columns (x) and rows (y). */
  readonly workgroup: readonly [number, number];
  /**
   * `'blocked'`: an invocation's columns are adjacent (col0 .. col0 + tileN - 1). `'strided'`: they
   * come in groups of 4 adjacent columns, the groups `4 * workgroup[0]` apart, so neighbouring
   * invocations read neighbouring groups of B (on adapters that run invocations as SIMD lanes, one
   * load across the lanes touches one stretch of memory).
   */
  readonly columns: 'blocked' | 'strided';
}

/**
 * Operands read four floats at a time (`array<vec4f>`): A along k where it is f32, not transposed,
 * and its rows start at multiples of 4 floats; B along n likewise. `matmulLaunch` decides per call.
 */
export interface VectorLoads {
  readonly a: boolean;
  readonly b: boolean;
}

/**
 * The strided form of the kernel (`matmulStrided`, [Note: the WebGPU strided matmul] in
 * matmul-strided.ts): A, B and C are read and written at `offset + sum(i_d * stride_d)` over
 * `batchRank` batch dims (the workgroup's z index split into them) and the matrix dims, and C is
 * added to where the accumulate word is not 0 (a word, not two pipelines: each costs its compile,
 * 0.7-1.2 s on lavapipe with an empty shader cache). Params: [M, N, K, aOffset, bOffset, cOffset,
 * A's row and k strides, B's k and column strides, C's row and column strides, accumulate, the
 * batch dims, then A's, B's and C's strides along them].
 */
export interface StridedForm {
  readonly batchRank: number;
}

/** The same tiling, always: the key part of the pipeline cache. */
export function tilingKey(t: RegisterTiling): string {
  return `${t.tileM}x${t.tileN}:${t.workgroup[0]}x${t.workgroup[1]}:${t.columns}`;
}

/** Rows and columns of C one workgroup covers. */
export function workgroupTile(t: RegisterTiling): [number, number] {
  return [t.tileM * t.workgroup[1], t.tileN * t.workgroup[0]];
}

/**
 * WGSL of the register-tiled kernel: every invocation computes tileM x tileN outputs in named vec4
 * accumulators, fully unrolled, reading A and B straight from storage (no shared memory, no
 * barriers). Loads clamp their row and column to the matrix, stores are guarded, so any M, N, K
 * work. The k loop is unrolled by 4 with a scalar tail. Rows come from the workgroup id when the
 * workgroup is one row of invocations, so a compiler that tracks uniform values loads A once for
 * all lanes.
 */
export function registerTiledWgsl(
  a: DType,
  b: DType,
  transposeA: boolean,
  transposeB: boolean,
  t: RegisterTiling,
  vec: VectorLoads = { a: false, b: false },
  strided: StridedForm | null = null,
): string {
  if (strided !== null && (transposeA || transposeB || vec.a || vec.b)) {
    throw new Error('the strided matmul reads its operands through their strides only');
  }
  const { tileM, tileN, columns } = t;
  const [wx, wy] = t.workgroup;
  const rows = Array.from({ length: tileM }, (_, r) => r);
  const groups = Array.from({ length: tileN / 4 }, (_, j) => j);
  const cols = Array.from({ length: tileN }, (_, c) => c);
  const colOf = (c: number) =>
    columns === 'blocked' ? `col0 + ${c}u` : `col0 + ${(c >> 2) * 4 * wx + (c & 3)}u`;
  const vecDecl = (binding: number, name: string) =>
    `@group(0) @binding(${binding}) var<storage, read> ${name}: array<vec4f>;
fn ld_${name}(i: u32) -> f32 { return ${name}[i >> 2u][i & 3u]; }`;
  const L: string[] = [CONVERT];
  L.push(vec.a ? vecDecl(0, 'A') : `${declare(0, 'A', a, 'read')}\n${loader('A', a)}`);
  L.push(vec.b ? vecDecl(1, 'B') : `${declare(1, 'B', b, 'read')}\n${loader('B', b)}`);
  L.push('@group(0) @binding(2) var<storage, read_write> C: array<f32>;', paramsDecl(3));
  const rowIndex = wy === 1 ? 'w.y' : `w.y * ${wy}u + l.y`;
  const colStart =
    columns === 'blocked' ? `(w.x * ${wx}u + l.x) * ${tileN}u` : `w.x * ${wx * tileN}u + l.x * 4u`;
  L.push(`@compute @workgroup_size(${wx}, ${wy}, 1)
fn main(@builtin(local_invocation_id) l: vec3u, @builtin(workgroup_id) w: vec3u) {
  let M = prm[0];
  let N = prm[1];
  let K = prm[2];
  let row0 = (${rowIndex}) * ${tileM}u;
  let col0 = ${colStart};
  if (row0 >= M || col0 >= N) { return; }`);
  if (strided === null) {
    L.push('  let aBase = prm[3] + w.z * prm[6];', '  let bBase = prm[4] + w.z * prm[7];');
  } else L.push(...stridedBases(strided.batchRank));
  // The strided form reads A as [m, k] at aBase + m * prm[6] + k * prm[7], B as [k, n] at
  // bBase + k * prm[8] + n * prm[9].
  const aRow = strided === null ? 'K' : 'prm[6]';
  for (const r of rows) {
    L.push(`  let m${r} = min(row0 + ${r}u, M - 1u);`);
    if (!transposeA) L.push(`  let ar${r} = aBase + m${r} * ${aRow};`);
  }
  for (const c of cols) {
    L.push(`  let n${c} = min(${colOf(c)}, N - 1u);`);
    if (transposeB) L.push(`  let bc${c} = bBase + n${c} * K;`);
    if (strided !== null) L.push(`  let bc${c} = bBase + n${c} * prm[9];`);
  }
  // Vector loads of B start at each group's first column, clamped to the last whole group.
  if (vec.b) for (const j of groups) L.push(`  let g${j} = min(${colOf(j * 4)}, N - 4u);`);
  for (const r of rows) for (const j of groups) L.push(`  var acc${r}_${j} = vec4f(0.0);`);
  const aAt = (r: number, k: string) => {
    if (strided !== null) return `ld_A(ar${r} + (${k}) * prm[7])`;
    return transposeA ? `ld_A(aBase + (${k}) * M + m${r})` : `ld_A(ar${r} + ${k})`;
  };
  const bAt = (k: string, c: number) => {
    if (strided !== null) return `ld_B(bc${c} + (${k}) * prm[8])`;
    return transposeB ? `ld_B(bc${c} + ${k})` : `ld_B(bBase + (${k}) * N + n${c})`;
  };
  L.push('  let K4 = K & ~3u;');
  L.push('  for (var k = 0u; k < K4; k += 4u) {');
  for (const r of rows) {
    L.push(
      vec.a
        ? `    let a${r} = A[(ar${r} + k) >> 2u];`
        : `    let a${r} = vec4f(${[0, 1, 2, 3].map((q) => aAt(r, q === 0 ? 'k' : `k + ${q}u`)).join(', ')});`,
    );
  }
  for (const q of [0, 1, 2, 3]) {
    const k = q === 0 ? 'k' : `k + ${q}u`;
    for (const j of groups) {
      L.push(
        vec.b
          ? `    let b${q}_${j} = B[(bBase + (${k}) * N + g${j}) >> 2u];`
          : `    let b${q}_${j} = vec4f(${[0, 1, 2, 3].map((c) => bAt(k, j * 4 + c)).join(', ')});`,
      );
    }
  }
  for (const r of rows) {
    for (const j of groups) {
      L.push(
        `    acc${r}_${j} = acc${r}_${j} + a${r}.x * b0_${j} + a${r}.y * b1_${j} + a${r}.z * b2_${j} + a${r}.w * b3_${j};`,
      );
    }
  }
  L.push('  }');
  L.push('  for (var k = K4; k < K; k++) {');
  for (const j of groups) {
    L.push(
      vec.b
        ? `    let b_${j} = B[(bBase + k * N + g${j}) >> 2u];`
        : `    let b_${j} = vec4f(${[0, 1, 2, 3].map((c) => bAt('k', j * 4 + c)).join(', ')});`,
    );
  }
  for (const r of rows) {
    L.push(`    let a${r} = ${aAt(r, 'k')};`);
    for (const j of groups) L.push(`    acc${r}_${j} = acc${r}_${j} + a${r} * b_${j};`);
  }
  L.push('  }');
  if (strided === null) L.push('  let cBase = prm[5] + w.z * M * N;');
  const [cRow, cCol] = strided === null ? ['N', ''] : ['prm[10]', ' * prm[11]'];
  for (const r of rows) {
    L.push(`  if (row0 + ${r}u < M) {`);
    L.push(`    let cr = cBase + (row0 + ${r}u) * ${cRow};`);
    for (const j of groups) {
      for (const c of [0, 1, 2, 3]) {
        const col = colOf(j * 4 + c);
        const comp = ['x', 'y', 'z', 'w'][c];
        const v = `acc${r}_${j}.${comp}`;
        if (strided === null) {
          L.push(`    if (${col} < N) { C[cr + ${col}] = ${v}; }`);
        } else {
          L.push(
            `    if (${col} < N) { let at = cr + (${col})${cCol}; C[at] = select(${v}, C[at] + ${v}, prm[12] != 0u); }`,
          );
        }
      }
    }
    L.push('  }');
  }
  L.push('}');
  return L.join('\n');
}

/**
 * The strided form's operand bases: the workgroup's z index split into the batch dims (the last
 * fastest), each index times each operand's stride along its dim.
 */
function stridedBases(batchRank: number): string[] {
  const L = ['  var aBase = prm[3];', '  var bBase = prm[4];', '  var cBase = prm[5];'];
  if (batchRank === 0) return L;
  L.push('  var z = w.z;');
  for (let d = batchRank - 1; d >= 0; d--) {
    const dim = `prm[${13 + d}]`;
    L.push(`  {`, `    let i = z % ${dim};`, `    z = z / ${dim};`);
    L.push(`    aBase += i * prm[${13 + batchRank + d}];`);
    L.push(`    bBase += i * prm[${13 + 2 * batchRank + d}];`);
    L.push(`    cBase += i * prm[${13 + 3 * batchRank + d}];`, '  }');
  }
  return L;
}
