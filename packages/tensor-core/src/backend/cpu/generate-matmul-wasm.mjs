// Builds the CPU backend's WASM SIMD f32 matmul: writes matmul.wat (the source, for reading and
// review) and matmul-wasm.generated.ts (the assembled bytes, checked in so the package needs no
// build step to run). Run with `node src/backend/cpu/generate-matmul-wasm.mjs` after a change; it
// also builds the other kernels' module (generate-kernels-wasm.mjs). The design is [Note: the WASM
// SIMD matmul] in matmul-wasm.ts.
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import wabtInit from 'wabt';
import { generateKernelsWasm } from './generate-kernels-wasm.mjs';

const here = dirname(fileURLToPath(import.meta.url));

// The register tile is MR rows x NR columns (NR = 8: two f32x4 per row, 2 MR accumulators). 5x8
// and 6x8 tiles (MC = 60) measured the same as 4x8 (about 30 GFLOP/s on one Xeon core): 4x8 leaves
// registers to spare on engines with fewer of them.
const MR = 4;
const NR = 8;
// Cache blocks: a KC-deep slice of an A panel (4 KiB) and of a B panel (8 KiB) stay in L1 for one
// tile; MC rows of A by KC (64 KiB) stay in L2 while every B panel passes over them.
const KC = 256;
const MC = 64;
// k steps unrolled per trip of the register tile's loop.
const UNROLL = 4;
// Bytes 0..SCRATCH_BYTES-1 hold one edge tile (MR x NR f32) per thread, 16 threads at most;
// operands start at SCRATCH_BYTES.
const SCRATCH_BYTES = 16 * MR * NR * 4;
if (MC % MR !== 0 || MR * NR * 4 > SCRATCH_BYTES)
  throw new Error('MC must be a multiple of MR and the edge tile must fit the scratch bytes');

const acc = (r, h) => `$c${r}${h}`;
const accLocals = Array.from({ length: MR }, (_, r) =>
  [0, 1].map((h) => `(local ${acc(r, h)} v128)`).join(' '),
).join(' ');

// One k step: two B vectors, then each row's A value splatted and multiplied into its row; with
// `relaxed`, one relaxed fused multiply-add instead of a multiply and an add.
function kStep(step, relaxed) {
  const b = step * NR * 4;
  const a = step * MR * 4;
  const lines = [
    `(local.set $b0 (v128.load offset=${b} (local.get $pb)))`,
    `(local.set $b1 (v128.load offset=${b + 16} (local.get $pb)))`,
  ];
  for (let r = 0; r < MR; r++) {
    lines.push(`(local.set $a (v128.load32_splat offset=${a + r * 4} (local.get $pa)))`);
    for (const h of [0, 1]) {
      lines.push(
        relaxed
          ? `(local.set ${acc(r, h)} (f32x4.relaxed_madd (local.get $a) (local.get $b${h}) (local.get ${acc(r, h)})))`
          : `(local.set ${acc(r, h)} (f32x4.add (local.get ${acc(r, h)}) (f32x4.mul (local.get $a) (local.get $b${h}))))`,
      );
    }
  }
  return lines.map((l) => `            ${l}`).join('\n');
}

// Load (from, a pointer expression per row) or store the accumulators; row stride in bytes.
function forRows(op, base, stride) {
  const lines = [];
  for (let r = 0; r < MR; r++) {
    const at = `(i32.add (local.get ${base}) (i32.mul (i32.const ${r}) (local.get ${stride})))`;
    for (const h of [0, 1]) {
      lines.push(
        op === 'load'
          ? `(local.set ${acc(r, h)} (v128.load offset=${h * 16} ${at}))`
          : `(v128.store offset=${h * 16} ${at} (local.get ${acc(r, h)}))`,
      );
    }
  }
  return lines.map((l) => `          ${l}`).join('\n');
}

const zeroAcc = Array.from({ length: MR }, (_, r) =>
  [0, 1].map((h) => `(local.set ${acc(r, h)} (v128.const i32x4 0 0 0 0))`).join(' '),
)
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

// pack(src, dst, outer, inner, width, so, si): for each panel p of `width` along `outer`, for each
// t < inner, for each lane l < width: dst <- src[(p*width + l)*so + t*si], or 0 past `outer`.
// A packs with outer = m (so, si = A's row and k strides); B with outer = n.
const pack = `  ;; Pack a matrix into panels of \`width\` lanes along \`outer\`, \`inner\` deep, zero-padded.
  ;; Element (o, t) is at src + (o*so + t*si)*4: strides in elements handle transposes.
  (func $pack (export "pack") (param $src i32) (param $dst i32) (param $outer i32) (param $inner i32)
    (param $width i32) (param $so i32) (param $si i32)
    (local $o0 i32) (local $t i32) (local $l i32) (local $o i32) (local $row i32)
    (block $pd (loop $pl
      (br_if $pd (i32.ge_u (local.get $o0) (local.get $outer)))
      (local.set $t (i32.const 0))
      (block $td (loop $tl
        (br_if $td (i32.ge_u (local.get $t) (local.get $inner)))
        (local.set $l (i32.const 0))
        (block $ld (loop $ll
          (br_if $ld (i32.ge_u (local.get $l) (local.get $width)))
          (local.set $o (i32.add (local.get $o0) (local.get $l)))
          (f32.store (local.get $dst)
            (if (result f32) (i32.lt_u (local.get $o) (local.get $outer))
              (then (f32.load (i32.add (local.get $src) (i32.shl
                (i32.add (i32.mul (local.get $o) (local.get $so)) (i32.mul (local.get $t) (local.get $si)))
                (i32.const 2)))))
              (else (f32.const 0))))
          (local.set $dst (i32.add (local.get $dst) (i32.const 4)))
          (local.set $l (i32.add (local.get $l) (i32.const 1)))
          (br $ll)))
        (local.set $t (i32.add (local.get $t) (i32.const 1)))
        (br $tl)))
      (local.set $o0 (i32.add (local.get $o0) (local.get $width)))
      (br $pl))))
`;

// gemm(ap, bp, c, m, k, n, tile): C[m, n] (row-major at c) = packed A times packed B, each element
// summed in f32 in k order: (((0 + a0 b0) + a1 b1) + ...), whatever the blocking. `tile` is the
// address of this caller's edge tile (threads each pass their own).
const gemm = (
  relaxed,
) => `  ;; C = A B from packed panels: A as ceil(m/${MR}) panels [k][${MR}], B as ceil(n/${NR}) panels [k][${NR}].
  (func (export "gemm") (param $ap i32) (param $bp i32) (param $c i32) (param $m i32) (param $k i32) (param $n i32) (param $zero i32)
    (local $k0 i32) (local $kc i32) (local $i0 i32) (local $i1 i32) (local $i i32) (local $j i32)
    (local $pa i32) (local $pb i32) (local $kk i32) (local $kend i32) (local $ldc i32) (local $ct i32)
    (local $rows i32) (local $cols i32) (local $r i32) (local $q i32) (local $edge i32)
    (local $a v128) (local $b0 v128) (local $b1 v128) ${accLocals}
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
            ;; the accumulators start at 0 on the first k block and at C's partial sums after it
            (if (i32.eqz (local.get $k0))
              (then
${zeroAcc})
              (else
                (if (local.get $edge)
                  (then
${edgeCopy(true)}
${forRows('load', '$zero', '$tileStride')})
                  (else
${forRows('load', '$ct', '$ldc')}))))
            (local.set $pa (i32.add (local.get $ap) (i32.shl (i32.add (i32.mul (local.get $i) (local.get $k)) (i32.mul (local.get $k0) (i32.const ${MR}))) (i32.const 2))))
            (local.set $pb (i32.add (local.get $bp) (i32.shl (i32.add (i32.mul (local.get $j) (local.get $k)) (i32.mul (local.get $k0) (i32.const ${NR}))) (i32.const 2))))
            (local.set $kk (i32.const 0))
            (local.set $kend (i32.and (local.get $kc) (i32.const ${-UNROLL})))
            (block $ud (loop $ul
              (br_if $ud (i32.ge_u (local.get $kk) (local.get $kend)))
${Array.from({ length: UNROLL }, (_, s) => kStep(s, relaxed)).join('\n')}
              (local.set $pa (i32.add (local.get $pa) (i32.const ${UNROLL * MR * 4})))
              (local.set $pb (i32.add (local.get $pb) (i32.const ${UNROLL * NR * 4})))
              (local.set $kk (i32.add (local.get $kk) (i32.const ${UNROLL})))
              (br $ul)))
            (block $sd (loop $sl
              (br_if $sd (i32.ge_u (local.get $kk) (local.get $kc)))
${kStep(0, relaxed)}
              (local.set $pa (i32.add (local.get $pa) (i32.const ${MR * 4})))
              (local.set $pb (i32.add (local.get $pb) (i32.const ${NR * 4})))
              (local.set $kk (i32.add (local.get $kk) (i32.const 1)))
              (br $sl)))
            (if (local.get $edge)
              (then
${forRows('store', '$zero', '$tileStride')}
${edgeCopy(false)})
              (else
${forRows('store', '$ct', '$ldc')}))
            (local.set $i (i32.add (local.get $i) (i32.const ${MR})))
            (br $il)))
          (local.set $j (i32.add (local.get $j) (i32.const ${NR})))
          (br $jl)))
        (local.set $i0 (local.get $i1))
        (br $ml)))
      (local.set $k0 (i32.add (local.get $k0) (local.get $kc)))
      (br $kl))))
`;

// The edge tile lives at `$zero` (a parameter) with a row stride of NR floats; `$tileStride` is a
// local so forRows can address it like C.
const gemmWithTile = (relaxed) =>
  gemm(relaxed)
    .replace('(local $edge i32)', '(local $edge i32) (local $tileStride i32)')
    .replace(
      '(local.set $ldc',
      `(local.set $tileStride (i32.const ${NR * 4}))\n    (local.set $ldc`,
    );

// Four modules: plain SIMD or relaxed SIMD's fused multiply-add, each with its own memory or
// importing a shared one (threads: every worker instantiates the module over the same memory).
// The largest memory is 2 GiB (32768 pages), the cap of i32 offsets as the loader uses them.
function moduleWat({ relaxed, shared }) {
  const memory = shared
    ? '(memory (import "env" "memory") 1 32768 shared)'
    : '(memory (export "memory") 1)';
  return `;; GENERATED by generate-matmul-wasm.mjs: the CPU backend's f32 matmul, f32x4 SIMD${relaxed ? ' with relaxed fused multiply-add' : ''}${shared ? ', over an imported shared memory' : ''}.
;; A ${MR}x${NR} register tile (${2 * MR} f32x4 accumulators), k blocks of ${KC}, row blocks of ${MC}.
;; Every pointer is a byte offset into the memory; bytes 0..${SCRATCH_BYTES - 1} hold the edge tiles, ${MR * NR * 4} bytes per thread.
(module
  ${memory}
  (global (export "scratchBytes") i32 (i32.const ${SCRATCH_BYTES}))
  (global (export "mr") i32 (i32.const ${MR}))
  (global (export "nr") i32 (i32.const ${NR}))
${pack}${gemmWithTile(relaxed)})
`;
}

const wabt = await wabtInit();
const VARIANTS = {
  simd: { relaxed: false, shared: false },
  relaxedSimd: { relaxed: true, shared: false },
  sharedSimd: { relaxed: false, shared: true },
  sharedRelaxedSimd: { relaxed: true, shared: true },
};
const encoded = {};
for (const [name, variant] of Object.entries(VARIANTS)) {
  const wat = moduleWat(variant);
  const module = wabt.parseWat('matmul.wat', wat, {
    simd: true,
    relaxed_simd: variant.relaxed,
    threads: variant.shared,
  });
  // wabt's validate forgets the threads feature; Node's own validation checks the shared variants
  // (relaxed SIMD needs --experimental-wasm-relaxed-simd in Node 20, so those are checked by wabt).
  if (!variant.shared) module.validate();
  const { buffer } = module.toBinary({});
  module.destroy();
  if (!variant.relaxed && !WebAssembly.validate(buffer))
    throw new Error(`${name} does not validate`);
  encoded[name] = Buffer.from(buffer).toString('base64');
  if (name === 'simd') writeFileSync(join(here, 'matmul.wat'), wat);
  console.log(`matmul.wasm (${name}): ${buffer.length} bytes`);
}

writeFileSync(
  join(here, 'matmul-wasm.generated.ts'),
  `// GENERATED by src/backend/cpu/generate-matmul-wasm.mjs (matmul.wat is the plain variant); do not edit.\n` +
    `/** The f32 matmul's WASM modules, base64: plain SIMD or relaxed SIMD, own or shared memory. */\n` +
    `export const matmulWasmBase64 = {\n${Object.entries(encoded)
      .map(([name, text]) => `  ${name}:\n    '${text}',`)
      .join('\n')}\n} as const;\n` +
    `/** The register tile the modules were built with: rows of A and columns of B per panel. */\n` +
    `export const matmulTile = { rows: ${MR}, columns: ${NR} } as const;\n` +
    `/** Bytes of edge tiles at the start of memory: ${SCRATCH_BYTES / (MR * NR * 4)} threads' worth. */\n` +
    `export const matmulScratchBytes = ${SCRATCH_BYTES};\n`,
);

await generateKernelsWasm();
