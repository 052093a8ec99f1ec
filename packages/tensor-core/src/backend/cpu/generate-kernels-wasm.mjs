// Builds the CPU backend's WASM SIMD f32 kernels other than matmul (elementwise maps with the
// broadcasts the models use, GELU and its gradient, where, sums along an axis; softmax and its
// gradient from kernels-wat-softmax.mjs; layer norm and Adam from kernels-wat-f64.mjs): writes
// kernels.wat (the source, for reading and review) and kernels-wasm.generated.ts (the assembled
// bytes, checked in so the package needs no build step to run). `generate-matmul-wasm.mjs` runs
// this too. The design is [Note: the WASM SIMD kernels] in kernels-wasm.ts.
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import wabtInit from 'wabt';
import { adam, layerNorm, layerNormBackward } from './kernels-wat-f64.mjs';
import { geluMaps, inlineTranscendentals } from './kernels-wat-gelu.mjs';
import { softmax, softmaxBackward } from './kernels-wat-softmax.mjs';
import { at, get, i32, loop } from './wat-text.mjs';

const here = dirname(fileURLToPath(import.meta.url));

// ---- elementwise binary ops ----------------------------------------------------------------
// add, sub, mul and div of two f32 values: f32 arithmetic rounds once, exactly as the TypeScript
// kernel's f64 arithmetic rounded to f32 (both operands are f32, and f64 carries more than twice
// f32's precision), so these agree bit for bit.
const BINARY = ['add', 'sub', 'mul', 'div'];

// vv: o[i] = a[i] op b[i] for i < n.
const vv = (
  op,
) => `  (func $${op}_vv (export "${op}_vv") (param $a i32) (param $b i32) (param $o i32) (param $n i32)
    (local $i i32)
    ${loop('v', 'i', get('n'), 4, `(v128.store ${at('o', get('i'))} (f32x4.${op} (v128.load ${at('a', get('i'))}) (v128.load ${at('b', get('i'))})))`)}
    ${loop('s', 'i', get('n'), 1, `(f32.store ${at('o', get('i'))} (f32.${op} (f32.load ${at('a', get('i'))}) (f32.load ${at('b', get('i'))})))`)})
`;

// vs / sv: o[i] = a[i] op s or s op a[i], with s an f64 (a JavaScript number): computed in f64 and
// rounded once, as the TypeScript kernel does, two lanes at a time.
function scalar(op, scalarFirst) {
  const name = `${op}_${scalarFirst ? 'sv' : 'vs'}`;
  const pair = (x) => (scalarFirst ? `(local.get $s2) ${x}` : `${x} (local.get $s2)`);
  const one = (x) => (scalarFirst ? `(local.get $s) ${x}` : `${x} (local.get $s)`);
  return `  (func $${name} (export "${name}") (param $a i32) (param $s f64) (param $o i32) (param $n i32)
    (local $i i32) (local $s2 v128)
    (local.set $s2 (f64x2.splat (local.get $s)))
    ${loop('v', 'i', get('n'), 2, `(v128.store64_lane 0 ${at('o', get('i'))} (f32x4.demote_f64x2_zero (f64x2.${op} ${pair(`(f64x2.promote_low_f32x4 (v128.load64_zero ${at('a', get('i'))}))`)})))`)}
    ${loop('s', 'i', get('n'), 1, `(f32.store ${at('o', get('i'))} (f32.demote_f64 (f64.${op} ${one(`(f64.promote_f32 (f32.load ${at('a', get('i'))}))`)})))`)})
`;
}

// Broadcasts over rows of `cols` elements:
//   vr: o[r, c] = a[r, c] op b[c]   (b repeats every row: a bias)
//   rv: o[r, c] = a[c] op b[r, c]
//   vc: o[r, c] = a[r, c] op b[r]   (one value of b per row)
//   cv: o[r, c] = a[r] op b[r, c]
// vc and cv splat an f32, so they agree bit for bit as vv does.
function rows(op, kind) {
  const name = `${op}_${kind}`;
  const rowA = kind === 'rv' ? get('a') : at('a', '(i32.mul (local.get $r) (local.get $cols))');
  const rowB = kind === 'vr' ? get('b') : at('b', '(i32.mul (local.get $r) (local.get $cols))');
  const rowO = at('o', '(i32.mul (local.get $r) (local.get $cols))');
  let body;
  if (kind === 'vr' || kind === 'rv') {
    body = `(call $${op}_vv ${rowA} ${rowB} ${rowO} (local.get $cols))`;
  } else {
    const value =
      kind === 'vc' ? `(f32.load ${at('b', get('r'))})` : `(f32.load ${at('a', get('r'))})`;
    const row = kind === 'vc' ? rowA : rowB;
    body = `(call $${op}_${kind === 'vc' ? 'vf' : 'fv'} ${row} ${value} ${rowO} (local.get $cols))`;
  }
  return `  (func (export "${name}") (param $a i32) (param $b i32) (param $o i32) (param $rows i32) (param $cols i32)
    (local $r i32)
    ${loop('r', 'r', get('rows'), 1, body)})
`;
}

// vf / fv: o[i] = a[i] op s or s op a[i] with s an f32 (the per-row value of vc and cv, and a
// JavaScript number that is an f32 value: f32 lanes then agree with vs / sv bit for bit, as vv does).
function f32Scalar(op, scalarFirst) {
  const name = `${op}_${scalarFirst ? 'fv' : 'vf'}`;
  const v = (x) => (scalarFirst ? `(local.get $s4) ${x}` : `${x} (local.get $s4)`);
  const one = (x) => (scalarFirst ? `(local.get $s) ${x}` : `${x} (local.get $s)`);
  return `  (func $${name} (export "${name}") (param $a i32) (param $s f32) (param $o i32) (param $n i32)
    (local $i i32) (local $s4 v128)
    (local.set $s4 (f32x4.splat (local.get $s)))
    ${loop('v', 'i', get('n'), 4, `(v128.store ${at('o', get('i'))} (f32x4.${op} ${v(`(v128.load ${at('a', get('i'))})`)}))`)}
    ${loop('s', 'i', get('n'), 1, `(f32.store ${at('o', get('i'))} (f32.${op} ${one(`(f32.load ${at('a', get('i'))})`)}))`)})
`;
}

// ---- where ---------------------------------------------------------------------------------
// where_rows: o[r, c] = cond[c] != 0 ? s : b[r, c] (condFirst = 0) or cond[c] != 0 ? b[r, c] : s
// (condFirst = 1... see the loader), with cond repeating every row (cols = its length; a cond of
// the output's shape is one row of n). s is an f32; NaN conditions count as true, as `!== 0` does.
const whereRows = `  (func (export "where_rows") (param $cond i32) (param $s f32) (param $b i32) (param $o i32)
    (param $rows i32) (param $cols i32) (param $scalarIfTrue i32)
    (local $r i32) (local $i i32) (local $row i32) (local $s4 v128) (local $m v128) (local $x v128)
    (local $c f32)
    (local.set $s4 (f32x4.splat (local.get $s)))
    ${loop(
      'r',
      'r',
      get('rows'),
      1,
      `(local.set $row (i32.mul (local.get $r) (local.get $cols)))
      (local.set $i (i32.const 0))
      ${loop(
        'v',
        'i',
        get('cols'),
        4,
        `(local.set $m (f32x4.ne (v128.load ${at('cond', get('i'))}) (v128.const f32x4 0 0 0 0)))
        (local.set $x (v128.load ${at('b', '(i32.add (local.get $row) (local.get $i))')}))
        (v128.store ${at('o', '(i32.add (local.get $row) (local.get $i))')}
          (if (result v128) (local.get $scalarIfTrue)
            (then (v128.bitselect (local.get $s4) (local.get $x) (local.get $m)))
            (else (v128.bitselect (local.get $x) (local.get $s4) (local.get $m)))))`,
      )}
      ${loop(
        's',
        'i',
        get('cols'),
        1,
        `(local.set $c (f32.load ${at('cond', get('i'))}))
        (f32.store ${at('o', '(i32.add (local.get $row) (local.get $i))')}
          (select (local.get $s) (f32.load ${at('b', '(i32.add (local.get $row) (local.get $i))')})
            (i32.eq (f32.ne (local.get $c) (f32.const 0)) (local.get $scalarIfTrue))))`,
      )}`,
    )})
`;

// ---- sums along an axis --------------------------------------------------------------------
// x as [outer, r, inner]: o[p, q] = sum over k of x[p, k, q], each in f64 in k order (as the
// TypeScript kernel sums, so the results agree bit for bit), divided by r for a mean; two columns
// per f64x2, four of those (8 columns) per pass over the rows.
const reduceSum = `  (func (export "sum_axis") (param $x i32) (param $o i32) (param $outer i32) (param $r i32) (param $inner i32) (param $mean i32)
    (local $p i32) (local $q i32) (local $k i32) (local $base i32) (local $at i32) (local $stride i32)
    (local $s0 v128) (local $s1 v128) (local $s2 v128) (local $s3 v128) (local $s f64) (local $div v128)
    (local.set $stride (i32.shl (local.get $inner) ${i32(2)}))
    (local.set $div (f64x2.splat (f64.convert_i32_u (local.get $r))))
    ${loop(
      'p',
      'p',
      get('outer'),
      1,
      `(local.set $base ${at('x', '(i32.mul (i32.mul (local.get $p) (local.get $r)) (local.get $inner))')})
      (local.set $q (i32.const 0))
      ${loop(
        'q8',
        'q',
        get('inner'),
        8,
        `(local.set $s0 (v128.const i64x2 0 0)) (local.set $s1 (v128.const i64x2 0 0))
        (local.set $s2 (v128.const i64x2 0 0)) (local.set $s3 (v128.const i64x2 0 0))
        (local.set $at ${at('base', get('q'))})
        (local.set $k (i32.const 0))
        ${loop(
          'k8',
          'k',
          get('r'),
          1,
          `${[0, 1, 2, 3]
            .map(
              (j) =>
                `(local.set $s${j} (f64x2.add (local.get $s${j}) (f64x2.promote_low_f32x4 (v128.load64_zero offset=${j * 8} (local.get $at)))))`,
            )
            .join('\n          ')}
          (local.set $at (i32.add (local.get $at) (local.get $stride)))`,
        )}
        (if (local.get $mean) (then
${[0, 1, 2, 3].map((j) => `          (local.set $s${j} (f64x2.div (local.get $s${j}) (local.get $div)))`).join('\n')}))
${[0, 1, 2, 3]
  .map(
    (j) =>
      `        (v128.store64_lane offset=${j * 8} 0 ${at('o', '(i32.add (i32.mul (local.get $p) (local.get $inner)) (local.get $q))')} (f32x4.demote_f64x2_zero (local.get $s${j})))`,
  )
  .join('\n')}`,
      )}
      ${loop(
        'q1',
        'q',
        get('inner'),
        1,
        `(local.set $s (f64.const 0))
        (local.set $at ${at('base', get('q'))})
        (local.set $k (i32.const 0))
        ${loop(
          'k1',
          'k',
          get('r'),
          1,
          `(local.set $s (f64.add (local.get $s) (f64.promote_f32 (f32.load (local.get $at)))))
          (local.set $at (i32.add (local.get $at) (local.get $stride)))`,
        )}
        (if (local.get $mean) (then (local.set $s (f64.div (local.get $s) (f64.convert_i32_u (local.get $r))))))
        (f32.store ${at('o', '(i32.add (i32.mul (local.get $p) (local.get $inner)) (local.get $q))')} (f32.demote_f64 (local.get $s)))`,
      )}`,
    )})
`;

function moduleWat() {
  const parts = [];
  for (const op of BINARY) {
    parts.push(
      vv(op),
      scalar(op, false),
      scalar(op, true),
      f32Scalar(op, false),
      f32Scalar(op, true),
    );
    for (const kind of ['vr', 'rv', 'vc', 'cv']) parts.push(rows(op, kind));
  }
  parts.push(whereRows, geluMaps());
  parts.push(inlineTranscendentals(softmax), softmaxBackward, reduceSum);
  parts.push(layerNorm, layerNormBackward, adam);
  return `;; GENERATED by generate-kernels-wasm.mjs: the CPU backend's f32 kernels other than matmul, f32x4 SIMD.
;; Every pointer is a byte offset into the memory; bytes 0..31 are scratch for tails.
(module
  (memory (export "memory") 1)
${parts.join('')})
`;
}

/** Assembles the module and writes kernels.wat and kernels-wasm.generated.ts. */
export async function generateKernelsWasm() {
  const wabt = await wabtInit();
  const wat = moduleWat();
  const module = wabt.parseWat('kernels.wat', wat, { simd: true, bulk_memory: true });
  module.validate();
  const { buffer } = module.toBinary({});
  module.destroy();
  if (!WebAssembly.validate(buffer)) throw new Error('kernels.wasm does not validate');
  writeFileSync(join(here, 'kernels.wat'), wat);
  writeFileSync(
    join(here, 'kernels-wasm.generated.ts'),
    `// GENERATED by src/backend/cpu/generate-kernels-wasm.mjs (kernels.wat is its source); do not edit.\n` +
      `/** The CPU backend's f32 kernels other than matmul as one WASM SIMD module, base64. */\n` +
      `export const kernelsWasmBase64 =\n  '${Buffer.from(buffer).toString('base64')}';\n`,
  );
  console.log(`kernels.wasm: ${buffer.length} bytes`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await generateKernelsWasm();
