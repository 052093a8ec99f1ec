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
 * Operands read four floats at a time (`array<vec4f>`), along their contiguous axis: A along k,
 * or along m where it is transposed (four rows at a time, so `tileM` a multiple of 4); B along n,
 * or along k where it is transposed; each where it is f32 and that axis's runs start at multiples
 * of 4 floats. `matmulLaunch` decides per call. `shareA` (a subgroup size): A's vec4 loads (with
 * `a`), or in the strided form its scalar loads, are split between the lanes of a subgroup and
 * handed round with `subgroupBroadcast` ([Note: A's rows shared across a subgroup]).
 */
export interface VectorLoads {
  readonly a: boolean;
  readonly b: boolean;
  readonly shareA?: number;
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

/**
 * [Note: A's rows shared across a subgroup]
 *
 * The CPU adapters run a workgroup's invocations as the lanes of SIMD registers (lavapipe 8 lanes
 * of 256 bits, SwiftShader 4), and a load from a storage buffer is done lane by lane, each lane's
 * vec4 a component at a time, even where every lane reads the same address (a workgroup of one
 * row of invocations, whose rows come from the workgroup id, measured no faster). These loads,
 * not the multiply-adds, are the register-tiled kernel's time on lavapipe: [512, 64] x [64, 256]
 * with the 8x4 tile took 8.2 ms, 2.8 ms without A's 8 vec4 loads per 4 k, 5.0 without B's 4,
 * 1.0 ms with neither (the 2-core Xeon, 2026-11-29).
 *
 * But in a workgroup of one row of invocations every lane needs the same tileM rows of A. So a
 * workgroup is one subgroup (`workgroup` [S, 1] on an adapter whose subgroups are always S lanes),
 * each lane loads tileM / S of the vec4s of A a step of 4 k needs, and `subgroupBroadcast` with a
 * constant lane hands each to every lane: a register shuffle, not a load. A not transposed: lane
 * s loads row row0 + j S + s (k .. k + 3). Transposed (A^T's rows are A's columns, four read as
 * one vec4 along m): the 4 G vec4s of a step (G = tileM / 4 groups of four rows, at k + q),
 * numbered i = q G + g, lane s loading i = j S + s. Each lane then holds, for each row, the four
 * values it would have loaded itself, and accumulates them in the same expression: the bits are
 * those of the kernel without sharing (`matmul-tuning.test.ts` compares them).
 *
 * What it needs: the `subgroups` feature, subgroups of one fixed size (`usableTuning` drops the
 * subgroup tiling otherwise), A readable as vec4 (f32, its runs along the contiguous axis
 * 4-aligned; other calls take the tuning's own tiling), and every lane of the subgroup present at
 * each broadcast, so no early return (lanes past N load clamped columns and store nothing). The
 * strided form (attention's heads, `matmul-strided.ts`) shares A's 4 tileM scalars a step the
 * same way, lane s loading scalar i = j S + s (row i / 4 at k + i % 4): 2.1-3.4x on the default
 * GPT's four strided products on lavapipe. Measured with the tables' tilings (the
 * default GPT's products; lavapipe 16x4 on 8 lanes, SwiftShader 8x4 on 4): lavapipe 2.6-5.0x
 * faster per product than the 8x4 tile, SwiftShader 1.6-1.8x than the 8x8 tile; the default
 * GPT's WebGPU step, same bits, 0.45-0.48 of its time on lavapipe and 0.59-0.63 on SwiftShader
 * (the README).
 */

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
  const share = vec.shareA ?? 0;
  const sharedScalars = share > 0 && strided !== null;
  if (share > 0 && ((!vec.a && !sharedScalars) || wx !== share || wy !== 1 || tileM % share)) {
    throw new Error(
      'A is shared across a subgroup as vec4 loads or strided, one subgroup a workgroup',
    );
  }
  if (vec.a && transposeA && tileM % 4 !== 0) {
    throw new Error("a transposed A's vec4 loads hold four rows: tileM must be a multiple of 4");
  }
  const rows = Array.from({ length: tileM }, (_, r) => r);
  const groups = Array.from({ length: tileN / 4 }, (_, j) => j);
  const cols = Array.from({ length: tileN }, (_, c) => c);
  const quads = [0, 1, 2, 3];
  const comp = (i: number) => ['x', 'y', 'z', 'w'][i] as string;
  // A transposed and read as vec4: group g holds rows row0 + 4g .. + 3 (G groups).
  const G = tileM / 4;
  const colOf = (c: number) =>
    columns === 'blocked' ? `col0 + ${c}u` : `col0 + ${(c >> 2) * 4 * wx + (c & 3)}u`;
  const vecDecl = (binding: number, name: string) =>
    `@group(0) @binding(${binding}) var<storage, read> ${name}: array<vec4f>;
fn ld_${name}(i: u32) -> f32 { return ${name}[i >> 2u][i & 3u]; }`;
  const L: string[] = share > 0 ? ['enable subgroups;', CONVERT] : [CONVERT];
  L.push(vec.a ? vecDecl(0, 'A') : `${declare(0, 'A', a, 'read')}\n${loader('A', a)}`);
  L.push(vec.b ? vecDecl(1, 'B') : `${declare(1, 'B', b, 'read')}\n${loader('B', b)}`);
  L.push('@group(0) @binding(2) var<storage, read_write> C: array<f32>;', paramsDecl(3));
  const rowIndex = wy === 1 ? 'w.y' : `w.y * ${wy}u + l.y`;
  const colStart =
    columns === 'blocked' ? `(w.x * ${wx}u + l.x) * ${tileN}u` : `w.x * ${wx * tileN}u + l.x * 4u`;
  const lane = share > 0 ? ', @builtin(subgroup_invocation_id) sid: u32' : '';
  L.push(`@compute @workgroup_size(${wx}, ${wy}, 1)
fn main(@builtin(local_invocation_id) l: vec3u, @builtin(workgroup_id) w: vec3u${lane}) {
  let M = prm[0];
  let N = prm[1];
  let K = prm[2];
  let row0 = (${rowIndex}) * ${tileM}u;
  let col0 = ${colStart};`);
  // A subgroup's broadcasts need all its lanes: its lanes past N load clamped columns and store
  // nothing (row0 < M always: one row of invocations a workgroup).
  if (share === 0) L.push('  if (row0 >= M || col0 >= N) { return; }');
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
  if (vec.a && transposeA) {
    // Each group's first row, clamped to the last whole group (M is a multiple of 4).
    for (let g = 0; g < G; g++) L.push(`  let rg${g} = min(row0 + ${4 * g}u, M - 4u);`);
  }
  // Strided, lane sid's j-th load is the scalar i = j * share + sid of the 4 tileM a step needs:
  // row i / 4 at k + i % 4.
  for (let j = 0; sharedScalars && j < (4 * tileM) / share; j++) {
    L.push(`  let ia${j} = ${j * share}u + sid;`);
    L.push(`  let sr${j} = aBase + min(row0 + (ia${j} >> 2u), M - 1u) * prm[6];`);
    L.push(`  let sq${j} = ia${j} & 3u;`);
  }
  for (let j = 0; share > 0 && !sharedScalars && j < tileM / share; j++) {
    // Lane sid's j-th load: A's row row0 + j * share + sid, or (transposed) the vec4 of index
    // i = j * share + sid among the 4 x G a step needs, k + i / G and group i % G.
    if (transposeA) {
      L.push(`  let ia${j} = ${j * share}u + sid;`);
      L.push(`  let qa${j} = ia${j} / ${G}u;`);
      L.push(`  let ga${j} = min(row0 + (ia${j} % ${G}u) * 4u, M - 4u);`);
    } else L.push(`  let sr${j} = aBase + min(row0 + ${j * share}u + sid, M - 1u) * K;`);
  }
  for (const c of cols) {
    L.push(`  let n${c} = min(${colOf(c)}, N - 1u);`);
    if (transposeB) L.push(`  let bc${c} = bBase + n${c} * K;`);
    if (strided !== null) L.push(`  let bc${c} = bBase + n${c} * prm[9];`);
  }
  // Vector loads of B start at each group's first column, clamped to the last whole group.
  if (vec.b && !transposeB) {
    for (const j of groups) L.push(`  let g${j} = min(${colOf(j * 4)}, N - 4u);`);
  }
  for (const r of rows) for (const j of groups) L.push(`  var acc${r}_${j} = vec4f(0.0);`);
  const aAt = (r: number, k: string) => {
    if (strided !== null) return `ld_A(ar${r} + (${k}) * prm[7])`;
    return transposeA ? `ld_A(aBase + (${k}) * M + m${r})` : `ld_A(ar${r} + ${k})`;
  };
  const bAt = (k: string, c: number) => {
    if (strided !== null) return `ld_B(bc${c} + (${k}) * prm[8])`;
    return transposeB ? `ld_B(bc${c} + ${k})` : `ld_B(bBase + (${k}) * N + n${c})`;
  };
  const kq = (q: number) => (q === 0 ? 'k' : `k + ${q}u`);
  // a_r: row r's four values at k .. k + 3, as a vec4.
  const transposedA = (at: (q: number, g: number) => string) =>
    rows.map(
      (r) =>
        `    let a${r} = vec4f(${quads.map((q) => `${at(q, r >> 2)}.${comp(r & 3)}`).join(', ')});`,
    );
  L.push('  let K4 = K & ~3u;');
  L.push('  for (var k = 0u; k < K4; k += 4u) {');
  if (sharedScalars) {
    for (let j = 0; j < (4 * tileM) / share; j++) {
      L.push(`    let sa${j} = ld_A(sr${j} + (k + sq${j}) * prm[7]);`);
    }
    const at = (i: number) => `subgroupBroadcast(sa${Math.floor(i / share)}, ${i % share}u)`;
    for (const r of rows)
      L.push(`    let a${r} = vec4f(${quads.map((q) => at(4 * r + q)).join(', ')});`);
  } else if (share > 0 && transposeA) {
    for (let j = 0; j < tileM / share; j++) {
      L.push(`    let sa${j} = A[(aBase + (k + qa${j}) * M + ga${j}) >> 2u];`);
    }
    for (let i = 0; i < 4 * G; i++) {
      L.push(`    let v${i} = subgroupBroadcast(sa${Math.floor(i / share)}, ${i % share}u);`);
    }
    L.push(...transposedA((q, g) => `v${q * G + g}`));
  } else if (share > 0) {
    for (let j = 0; j < tileM / share; j++) L.push(`    let sa${j} = A[(sr${j} + k) >> 2u];`);
    for (const r of rows) {
      L.push(`    let a${r} = subgroupBroadcast(sa${Math.floor(r / share)}, ${r % share}u);`);
    }
  } else if (vec.a && transposeA) {
    for (const q of quads) {
      for (let g = 0; g < G; g++)
        L.push(`    let at${q}_${g} = A[(aBase + (${kq(q)}) * M + rg${g}) >> 2u];`);
    }
    L.push(...transposedA((q, g) => `at${q}_${g}`));
  } else {
    for (const r of rows) {
      L.push(
        vec.a
          ? `    let a${r} = A[(ar${r} + k) >> 2u];`
          : `    let a${r} = vec4f(${quads.map((q) => aAt(r, kq(q))).join(', ')});`,
      );
    }
  }
  if (vec.b && transposeB) {
    // Each column's four values along k, then regrouped as four columns at each k.
    for (const c of cols) L.push(`    let bk${c} = B[(bc${c} + k) >> 2u];`);
  }
  for (const q of quads) {
    for (const j of groups) {
      let load: string;
      if (vec.b && transposeB) {
        load = `vec4f(${quads.map((c) => `bk${j * 4 + c}.${comp(q)}`).join(', ')})`;
      } else if (vec.b) load = `B[(bBase + (${kq(q)}) * N + g${j}) >> 2u]`;
      else load = `vec4f(${quads.map((c) => bAt(kq(q), j * 4 + c)).join(', ')})`;
      L.push(`    let b${q}_${j} = ${load};`);
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
      vec.b && !transposeB
        ? `    let b_${j} = B[(bBase + k * N + g${j}) >> 2u];`
        : `    let b_${j} = vec4f(${quads.map((c) => bAt('k', j * 4 + c)).join(', ')});`,
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
      for (const c of quads) {
        const col = colOf(j * 4 + c);
        const v = `acc${r}_${j}.${comp(c)}`;
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
