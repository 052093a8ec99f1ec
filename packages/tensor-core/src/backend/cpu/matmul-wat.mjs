import { attentionWat } from './attention-wat.mjs';
import { geluMaps } from './kernels-wat-gelu.mjs';
import { packWat } from './matmul-pack-wat.mjs';

// The WAT text of the CPU backend's f32 matmul module, for a given register tile and cache
// blocks: generate-matmul-wasm.mjs assembles it with the shipped parameters, and
// bench/matmul-wasm-tiles.ts with others, to compare them. The design is [Note: the WASM SIMD
// matmul] in matmul-wasm.ts.

/** The shipped parameters. See [Note: the WASM SIMD matmul] for why these. */
export const MATMUL_DEFAULTS = Object.freeze({
  /** Rows of A per register tile. */
  mr: 4,
  /** Columns of B per register tile (a multiple of 4: NR / 4 f32x4 per row). */
  nr: 8,
  /** k steps per cache block. */
  kc: 256,
  /** Rows of A per cache block (a multiple of mr). */
  mc: 64,
  /** k steps per trip of the register tile's loop. */
  unroll: 1,
  /** Whether `pack` copies full panels with SIMD (false: element by element, as before). */
  simdPack: true,
  /**
   * How a k step broadcasts A's values: 'load' (v128.load32_splat) or 'shuffle' (one v128 load
   * per 4 rows, then i8x16.shuffle per row).
   */
  splat: 'load',
});

/** Threads whose edge tiles the scratch bytes hold. */
export const MAX_THREADS = 16;

/**
 * The module's WAT for `options` (MATMUL_DEFAULTS where absent), plain SIMD or relaxed SIMD's
 * fused multiply-add, with its own memory or an imported shared one. Returns the text and the
 * scratch bytes (edge tiles) at the start of memory.
 */
export function matmulWat(options = {}) {
  const {
    mr: MR,
    nr: NR,
    kc: KC,
    mc: MC,
    unroll: UNROLL,
    splat,
    simdPack,
  } = { ...MATMUL_DEFAULTS, ...options };
  const { relaxed = false, shared = false } = options;
  const NV = NR / 4;
  const SCRATCH_BYTES = MAX_THREADS * MR * NR * 4;
  if (!Number.isInteger(NV) || NV < 1) throw new Error('nr must be a positive multiple of 4');
  if (MC % MR !== 0) throw new Error('mc must be a multiple of mr');
  if (splat === 'shuffle' && MR % 4 !== 0)
    throw new Error("splat 'shuffle' needs mr a multiple of 4");

  const acc = (r, h) => `$c${r}_${h}`;
  const halves = Array.from({ length: NV }, (_, h) => h);
  const rowsOf = Array.from({ length: MR }, (_, r) => r);
  const accLocals = rowsOf
    .map((r) => halves.map((h) => `(local ${acc(r, h)} v128)`).join(' '))
    .join(' ');
  const bLocals = halves.map((h) => `(local $b${h} v128)`).join(' ');
  const aLocals =
    splat === 'load'
      ? ''
      : Array.from({ length: MR / 4 }, (_, g) => `(local $av${g} v128)`).join(' ');
  const madd = (a, h, r) =>
    relaxed
      ? `(local.set ${acc(r, h)} (f32x4.relaxed_madd ${a} (local.get $b${h}) (local.get ${acc(r, h)})))`
      : `(local.set ${acc(r, h)} (f32x4.add (local.get ${acc(r, h)}) (f32x4.mul ${a} (local.get $b${h}))))`;
  // The same multiply-add, for attention's products (attention-wat.mjs): acc = acc + a b.
  const attentionMadd = (accName, a, b) =>
    relaxed
      ? `(local.set ${accName} (f32x4.relaxed_madd ${a} ${b} (local.get ${accName})))`
      : `(local.set ${accName} (f32x4.add (local.get ${accName}) (f32x4.mul ${a} ${b})))`;
  const laneSplat = (lane) =>
    Array.from({ length: 4 }, () => [0, 1, 2, 3].map((byte) => lane * 4 + byte).join(' ')).join(
      ' ',
    );

  // One k step: NV vectors of B, then each row's A value broadcast and multiplied into its row.
  function kStep(step) {
    const b = step * NR * 4;
    const a = step * MR * 4;
    const lines = halves.map(
      (h) => `(local.set $b${h} (v128.load offset=${b + 16 * h} (local.get $pb)))`,
    );
    if (splat === 'shuffle') {
      for (let g = 0; g < MR / 4; g++)
        lines.push(`(local.set $av${g} (v128.load offset=${a + 16 * g} (local.get $pa)))`);
    }
    for (const r of rowsOf) {
      if (splat === 'load') {
        lines.push(`(local.set $a (v128.load32_splat offset=${a + r * 4} (local.get $pa)))`);
      } else {
        lines.push(
          `(local.set $a (i8x16.shuffle ${laneSplat(r % 4)} (local.get $av${r >> 2}) (local.get $av${r >> 2})))`,
        );
      }
      for (const h of halves) lines.push(madd('(local.get $a)', h, r));
    }
    return lines.map((l) => `            ${l}`).join('\n');
  }

  // Store the accumulators at the tile whose row 0 is at `base` ('store'), or add them to the
  // partial sums there ('add'); row stride in bytes.
  function forRows(op, base, stride) {
    const lines = [];
    for (const r of rowsOf) {
      const at = `(i32.add (local.get ${base}) (i32.mul (i32.const ${r}) (local.get ${stride})))`;
      for (const h of halves) {
        const sum =
          op === 'add'
            ? `(f32x4.add (v128.load offset=${h * 16} ${at}) (local.get ${acc(r, h)}))`
            : `(local.get ${acc(r, h)})`;
        lines.push(`(v128.store offset=${h * 16} ${at} ${sum})`);
      }
    }
    return lines.map((l) => `          ${l}`).join('\n');
  }

  const zeroAcc = rowsOf
    .map((r) => halves.map((h) => `(local.set ${acc(r, h)} (v128.const i32x4 0 0 0 0))`).join(' '))
    .map((l) => `          ${l}`)
    .join('\n');

  // Scalar copy between C and the edge tile for the valid rows/cols of a tile at $ct.
  function edgeCopy(toTile) {
    const cell =
      '(i32.add (local.get $ct) (i32.add (i32.mul (local.get $r) (local.get $ldc)) (i32.shl (local.get $q) (i32.const 2))))';
    const tileCell = `(i32.add (local.get $zero) (i32.shl (i32.add (i32.mul (local.get $r) (i32.const ${NR})) (local.get $q)) (i32.const 2)))`;
    const body = toTile
      ? `(f32.store ${tileCell} (f32.load ${cell}))`
      : `(f32.store ${cell} (f32.load ${tileCell}))`;
    return `          (local.set $r (i32.const 0))
          (block $rd (loop $rl
            (br_if $rd (i32.ge_u (local.get $r) (local.get $rows)))
            (local.set $q (i32.const 0))
            (block $qd (loop $ql
              (br_if $qd (i32.ge_u (local.get $q) (local.get $cols)))
              ${body}
              (local.set $q (i32.add (local.get $q) (i32.const 1)))
              (br $ql)))
            (local.set $r (i32.add (local.get $r) (i32.const 1)))
            (br $rl)))`;
  }

  // gemm(ap, bp, c, m, k, n, tile): C[m, n] (row-major at c) = packed A times packed B, each
  // element summed in f32 by blocks of KC k steps: each block in k order from 0,
  // (((0 + a0 b0) + a1 b1) + ...), and the blocks' sums added to C in k order (blocked summation,
  // as BLAS sums: [Note: the WASM SIMD matmul]). Threads split rows, so no bit depends on them.
  // `tile` is the address of this caller's edge tile (threads each pass their own). With `acc`
  // nonzero the first block adds to C too: a call over a slice of k that continues an earlier
  // call's sums ([Note: the WASM matmul in slices of k]), its first k a multiple of KC.
  // The k loop: one k step per trip, or UNROLL steps per trip and a loop for the rest.
  const stepLoop = (label, end, steps) => `            (block $${label}d (loop $${label}l
              (br_if $${label}d (i32.ge_u (local.get $kk) ${end}))
${Array.from({ length: steps }, (_, s) => kStep(s)).join('\n')}
              (local.set $pa (i32.add (local.get $pa) (i32.const ${steps * MR * 4})))
              (local.set $pb (i32.add (local.get $pb) (i32.const ${steps * NR * 4})))
              (local.set $kk (i32.add (local.get $kk) (i32.const ${steps})))
              (br $${label}l)))`;
  const kLoops =
    UNROLL === 1
      ? stepLoop('s', '(local.get $kc)', 1)
      : `            (local.set $kend (i32.and (local.get $kc) (i32.const ${-UNROLL})))
${stepLoop('u', '(local.get $kend)', UNROLL)}
${stepLoop('s', '(local.get $kc)', 1)}`;
  const gemm = `  ;; C = A B from packed panels: A as ceil(m/${MR}) panels [k][${MR}], B as ceil(n/${NR}) panels [k][${NR}].
  (func (export "gemm") (param $ap i32) (param $bp i32) (param $c i32) (param $m i32) (param $k i32) (param $n i32) (param $zero i32) (param $acc i32)
    (local $k0 i32) (local $kc i32) (local $i0 i32) (local $i1 i32) (local $i i32) (local $j i32)
    (local $pa i32) (local $pb i32) (local $kk i32) (local $kend i32) (local $ldc i32) (local $ct i32)
    (local $rows i32) (local $cols i32) (local $r i32) (local $q i32) (local $edge i32) (local $tileStride i32)
    (local $a v128) ${aLocals} ${bLocals} ${accLocals}
    (local.set $tileStride (i32.const ${NR * 4}))
    (local.set $ldc (i32.shl (local.get $n) (i32.const 2)))
    (block $kd (loop $kl
      (br_if $kd (i32.ge_u (local.get $k0) (local.get $k)))
      (local.set $kc (i32.sub (local.get $k) (local.get $k0)))
      (if (i32.gt_u (local.get $kc) (i32.const ${KC})) (then (local.set $kc (i32.const ${KC}))))
      (local.set $i0 (i32.const 0))
      (block $md (loop $ml
        (br_if $md (i32.ge_u (local.get $i0) (local.get $m)))
        (local.set $i1 (i32.add (local.get $i0) (i32.const ${MC})))
        (if (i32.gt_u (local.get $i1) (local.get $m)) (then (local.set $i1 (local.get $m))))
        (local.set $j (i32.const 0))
        (block $jd (loop $jl
          (br_if $jd (i32.ge_u (local.get $j) (local.get $n)))
          (local.set $i (local.get $i0))
          (block $id (loop $il
            (br_if $id (i32.ge_u (local.get $i) (local.get $i1)))
            (local.set $rows (i32.sub (local.get $m) (local.get $i)))
            (if (i32.gt_u (local.get $rows) (i32.const ${MR})) (then (local.set $rows (i32.const ${MR}))))
            (local.set $cols (i32.sub (local.get $n) (local.get $j)))
            (if (i32.gt_u (local.get $cols) (i32.const ${NR})) (then (local.set $cols (i32.const ${NR}))))
            (local.set $edge (i32.or (i32.lt_u (local.get $rows) (i32.const ${MR})) (i32.lt_u (local.get $cols) (i32.const ${NR}))))
            (local.set $ct (i32.add (local.get $c) (i32.add (i32.mul (local.get $i) (local.get $ldc)) (i32.shl (local.get $j) (i32.const 2)))))
            ;; every k block sums from 0; the first stores its sums in C (unless $acc), later ones add to C's
${zeroAcc}
            (local.set $pa (i32.add (local.get $ap) (i32.shl (i32.add (i32.mul (local.get $i) (local.get $k)) (i32.mul (local.get $k0) (i32.const ${MR}))) (i32.const 2))))
            (local.set $pb (i32.add (local.get $bp) (i32.shl (i32.add (i32.mul (local.get $j) (local.get $k)) (i32.mul (local.get $k0) (i32.const ${NR}))) (i32.const 2))))
            (local.set $kk (i32.const 0))
${kLoops}
            (if (local.get $edge)
              (then
                (if (i32.and (i32.eqz (local.get $k0)) (i32.eqz (local.get $acc)))
                  (then
${forRows('store', '$zero', '$tileStride')})
                  (else
${edgeCopy(true)}
${forRows('add', '$zero', '$tileStride')}))
${edgeCopy(false)})
              (else
                (if (i32.and (i32.eqz (local.get $k0)) (i32.eqz (local.get $acc)))
                  (then
${forRows('store', '$ct', '$ldc')})
                  (else
${forRows('add', '$ct', '$ldc')}))))
            (local.set $i (i32.add (local.get $i) (i32.const ${MR})))
            (br $il)))
          (local.set $j (i32.add (local.get $j) (i32.const ${NR})))
          (br $jl)))
        (local.set $i0 (local.get $i1))
        (br $ml)))
      (local.set $k0 (i32.add (local.get $k0) (local.get $kc)))
      (br $kl))))
`;

  // The largest memory is 2 GiB (32768 pages), the cap of i32 offsets as the loader uses them.
  const memory = shared
    ? '(memory (import "env" "memory") 1 32768 shared)'
    : '(memory (export "memory") 1)';
  const wat = `;; GENERATED by generate-matmul-wasm.mjs: the CPU backend's f32 matmul, f32x4 SIMD${relaxed ? ' with relaxed fused multiply-add' : ''}${shared ? ', over an imported shared memory' : ''}.
;; A ${MR}x${NR} register tile (${MR * NV} f32x4 accumulators), k blocks of ${KC}, row blocks of ${MC}.
;; Every pointer is a byte offset into the memory; bytes 0..${SCRATCH_BYTES - 1} hold the edge tiles, ${MR * NR * 4} bytes per thread.
;; gelu and gelu_grad are the kernels module's (kernels-wat-gelu.mjs), run on the threads in chunks; their tails use bytes 0..31.
;; attention_forward and attention_backward: attention's heads in one call each way (attention-wat.mjs), with the same multiply-add as gemm.
(module
  ${memory}
  (global (export "scratchBytes") i32 (i32.const ${SCRATCH_BYTES}))
  (global (export "mr") i32 (i32.const ${MR}))
  (global (export "nr") i32 (i32.const ${NR}))
${packWat({ simd: simdPack })}${gemm}${geluMaps()}${attentionWat(attentionMadd)})
`;
  return { wat, scratchBytes: SCRATCH_BYTES, mr: MR, nr: NR };
}

/**
 * `matmulWat(options)` assembled with `wabt` (the initialized wabt module, a development
 * dependency: the generator, the tests and the bench assemble with it; the package ships the
 * generated bytes): the module's bytes, its text, and the tile and scratch it was built with.
 */
export function assembleMatmul(wabt, options = {}) {
  const built = matmulWat(options);
  const module = wabt.parseWat('matmul.wat', built.wat, {
    simd: true,
    relaxed_simd: options.relaxed === true,
    threads: options.shared === true,
    bulk_memory: true,
  });
  try {
    // wabt's validate forgets the threads feature; Node's own validation checks the shared
    // variants (relaxed SIMD needs --experimental-wasm-relaxed-simd in Node 20, so wabt checks those).
    if (options.shared !== true) module.validate();
    const { buffer } = module.toBinary({});
    return { ...built, bytes: new Uint8Array(buffer) };
  } finally {
    module.destroy();
  }
}
