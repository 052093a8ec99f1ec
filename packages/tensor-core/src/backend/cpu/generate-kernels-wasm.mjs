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
import { softmax, softmaxBackward } from './kernels-wat-softmax.mjs';
import { at, get, i32, loop, splat } from './wat-text.mjs';

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

// ---- exp, erf, GELU ------------------------------------------------------------------------
// exp for x <= 0 (softmax's shifted inputs and GELU's Gaussian): Cephes' expf, range reduced by
// ln 2 (split in two for an exact product), a degree-5 polynomial, and 2^n built in the exponent
// bits; below -87.33 (where 2^n would leave the normal range) the result is 0, NaN stays NaN.
// Its clamp, and erf's, are `pmin` / `pmax` (one minps or maxps on x64) rather than `min` / `max`,
// whose NaN and signed-zero rules V8 builds from 7 instructions each on the value's critical path:
// the same bits for every input but NaN (a NaN stays NaN, its payload aside), and GELU 1.65x
// faster, its gradient 1.6x (137 against 225 us, 258 against 413 us on 131072 floats, issue 49).
// Writing the maps two vectors a trip changed nothing measurable: the clamps were the cost.
const expF32x4 = `  (func $exp4 (param $x v128) (result v128)
    (local $n v128) (local $r v128) (local $p v128) (local $under v128)
    (local.set $under (f32x4.lt (local.get $x) (v128.const f32x4 -87.33 -87.33 -87.33 -87.33)))
    (local.set $x (f32x4.pmax (f32x4.pmin (local.get $x) (v128.const f32x4 0 0 0 0)) (v128.const f32x4 -87.33 -87.33 -87.33 -87.33)))
    (local.set $n (f32x4.nearest (f32x4.mul (local.get $x) (v128.const f32x4 1.44269504088896341 1.44269504088896341 1.44269504088896341 1.44269504088896341))))
    (local.set $r (f32x4.sub (local.get $x) (f32x4.mul (local.get $n) (v128.const f32x4 0.693359375 0.693359375 0.693359375 0.693359375))))
    (local.set $r (f32x4.sub (local.get $r) (f32x4.mul (local.get $n) (v128.const f32x4 -2.12194440e-4 -2.12194440e-4 -2.12194440e-4 -2.12194440e-4))))
    (local.set $p (v128.const f32x4 1.9875691500e-4 1.9875691500e-4 1.9875691500e-4 1.9875691500e-4))
${['1.3981999507e-3', '8.3334519073e-3', '4.1665795894e-2', '1.6666665459e-1', '5.0000001201e-1']
  .map(
    (c) =>
      `    (local.set $p (f32x4.add (f32x4.mul (local.get $p) (local.get $r)) (v128.const f32x4 ${c} ${c} ${c} ${c})))`,
  )
  .join('\n')}
    (local.set $p (f32x4.add (f32x4.add (f32x4.mul (local.get $p) (f32x4.mul (local.get $r) (local.get $r))) (local.get $r)) (v128.const f32x4 1 1 1 1)))
    (local.set $p (f32x4.mul (local.get $p)
      (i32x4.shl (i32x4.add (i32x4.trunc_sat_f32x4_s (local.get $n)) (v128.const i32x4 127 127 127 127)) (i32.const 23))))
    (v128.andnot (local.get $p) (local.get $under)))
`;

// erf: the rational approximation Eigen and XLA use for f32 (an odd degree-13 numerator over an
// even degree-8 denominator on [-4, 4], abs error under 7e-8 in exact arithmetic; +-1 past 4),
// evaluated in f32 lanes four at a time as they evaluate it. GELU's 1 + erf(x) cancels for
// negative x, as PyTorch's f32 GELU does (it adds its f32 erf to 1 the same way): the absolute
// error of GELU stays under 1.2e-6, at its largest near x = -5.6 where erf is about to round to
// -1 (gelu-f32.test.ts holds it against f64 over every binade; [Note: the WASM SIMD kernels]).
const ERF_P = [
  '-2.72614225801306e-10',
  '2.77068142495902e-08',
  '-2.10102402082508e-06',
  '-5.69250639462346e-05',
  '-7.34990630326855e-04',
  '-2.95459980854025e-03',
  '-1.60960333262415e-02',
];
const ERF_Q = [
  '-1.45660718464996e-05',
  '-2.13374055278905e-04',
  '-1.68282697438203e-03',
  '-7.37332916720468e-03',
  '-1.42647390514189e-02',
];
function horner(coefficients, x2) {
  let expr = splat(coefficients[0]);
  for (const c of coefficients.slice(1)) expr = `(f32x4.add (f32x4.mul ${expr} ${x2}) ${splat(c)})`;
  return expr;
}
// NaN stays NaN (min and max propagate it, and |NaN| >= 4 is false); +-inf give +-1.
const erfF32x4 = `  (func $erf4 (param $x v128) (result v128)
    (local $x2 v128) (local $big v128) (local $one v128)
    (local.set $big (f32x4.ge (f32x4.abs (local.get $x)) ${splat(4)}))
    (local.set $one (v128.or ${splat(1)} (v128.and (local.get $x) (v128.const i32x4 0x80000000 0x80000000 0x80000000 0x80000000))))
    (local.set $x (f32x4.pmax (f32x4.pmin (local.get $x) ${splat(4)}) ${splat(-4)}))
    (local.set $x2 (f32x4.mul (local.get $x) (local.get $x)))
    (v128.bitselect (local.get $one)
      (f32x4.div (f32x4.mul (local.get $x) ${horner(ERF_P, '(local.get $x2)')}) ${horner(ERF_Q, '(local.get $x2)')})
      (local.get $big)))
`;

// gelu(x) = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2; geluGrad(x, dy) = dy (Phi(x) + x phi(x)),
// phi by the f32 exp: PyTorch's f32 formulas (GeluKernelImpl, GeluBackwardKernelImpl), in f32 lanes.
// gelu(+inf) = +inf, gelu(-inf) = NaN (-inf times 0) and both gradients NaN, as PyTorch gives.
const geluMap = `  (func $cdf4 (param $x v128) (result v128)
    (f32x4.mul ${splat(0.5)} (f32x4.add ${splat(1)} (call $erf4 (f32x4.mul (local.get $x) ${splat(Math.SQRT1_2)})))))
  (func $gelu4 (param $x v128) (result v128)
    (f32x4.mul (local.get $x) (call $cdf4 (local.get $x))))
  (func $geluGrad4 (param $x v128) (param $dy v128) (result v128)
    (f32x4.mul (local.get $dy) (f32x4.add (call $cdf4 (local.get $x))
      (f32x4.mul (f32x4.mul (local.get $x) ${splat(1 / Math.sqrt(2 * Math.PI))})
        (call $exp4 (f32x4.mul (f32x4.mul (local.get $x) (local.get $x)) ${splat(-0.5)}))))))
`;

// ---- inlining the 4-lane helpers -------------------------------------------------------------
// Node 20's V8 calls a WASM function for every four elements (it inlines WASM into WASM only from
// V8 12 on, and behind a flag before), so the maps and the softmax take the helpers' bodies inline
// at each call: every (call $helper args) becomes a block that sets the helper's parameters, as
// fresh locals of the caller, and runs its body. The same instructions in the same order, so the
// same bits; the call and its v128 arguments through the stack go away.
function sexprEnd(text, start) {
  let depth = 0;
  for (let i = start; i < text.length; i++) {
    if (text[i] === '(') depth++;
    else if (text[i] === ')' && --depth === 0) return i + 1;
  }
  throw new Error(`unbalanced WAT at ${start}`);
}
function topLevel(text) {
  const out = [];
  for (let i = 0; i < text.length; i++) {
    if (text[i] !== '(') continue;
    const end = sexprEnd(text, i);
    out.push(text.slice(i, end));
    i = end - 1;
  }
  return out;
}
function parseHelpers(wat) {
  const helpers = new Map();
  for (const match of wat.matchAll(/\(func \$(\w+)/g)) {
    const func = wat.slice(match.index, sexprEnd(wat, match.index));
    const parts = topLevel(func.slice(1, -1));
    const names = (kind) =>
      parts.filter((x) => x.startsWith(`(${kind} `)).map((x) => x.match(/\$(\w+)/)[1]);
    const body = parts.filter((x) => !/^\((param|result|local) /.test(x));
    helpers.set(match[1], { params: names('param'), locals: names('local'), body });
  }
  return helpers;
}
let inlined = 0;
function inlineHelpers(func, helpers) {
  const locals = [];
  const call = new RegExp(`\\(call \\$(${[...helpers.keys()].join('|')}) `);
  for (let m = func.match(call); m; m = func.match(call)) {
    const end = sexprEnd(func, m.index);
    const args = topLevel(func.slice(m.index + m[0].length, end - 1));
    const helper = helpers.get(m[1]);
    const prefix = `in${inlined++}_`;
    const names = [...helper.params, ...helper.locals];
    const rename = (text) =>
      text.replace(new RegExp(`\\$(${names.join('|')})\\b`, 'g'), (_, n) => `$${prefix}${n}`);
    for (const n of names) locals.push(`(local $${prefix}${n} v128)`);
    const sets = helper.params.map((n, i) => `(local.set $${prefix}${n} ${args[i]})`);
    const block = `(block (result v128) ${sets.join(' ')} ${helper.body.map(rename).join(' ')})`;
    func = func.slice(0, m.index) + block + func.slice(end);
  }
  const firstLine = func.indexOf('\n');
  return `${func.slice(0, firstLine + 1)}    ${locals.join(' ')}\n${func.slice(firstLine + 1)}`;
}

// Maps of one or two arrays by a 4-lane function; the tail goes through a zero-padded vector in
// the scratch bytes at 0..31, so every element takes the same instructions.
function lanes(name, fn, arity) {
  const args =
    arity === 1
      ? '(param $a i32) (param $o i32) (param $n i32)'
      : '(param $a i32) (param $b i32) (param $o i32) (param $n i32)';
  const call = (xa, xb) => (arity === 1 ? `(call $${fn} ${xa})` : `(call $${fn} ${xa} ${xb})`);
  const tailCopy = (src, dst) =>
    `(memory.copy ${dst} ${at(src, get('i'))} (i32.shl (i32.sub (local.get $n) (local.get $i)) ${i32(2)}))`;
  return `  (func (export "${name}") ${args}
    (local $i i32)
    ${loop('v', 'i', get('n'), 4, `(v128.store ${at('o', get('i'))} ${call(`(v128.load ${at('a', get('i'))})`, `(v128.load ${at('b', get('i'))})`)})`)}
    (if (i32.lt_u (local.get $i) (local.get $n)) (then
      (v128.store ${i32(0)} (v128.const i32x4 0 0 0 0))
      (v128.store ${i32(16)} (v128.const i32x4 0 0 0 0))
      ${tailCopy('a', i32(0))}
      ${arity === 2 ? tailCopy('b', i32(16)) : ''}
      (v128.store ${i32(0)} ${call(`(v128.load ${i32(0)})`, `(v128.load ${i32(16)})`)})
      (memory.copy ${at('o', get('i'))} ${i32(0)} (i32.shl (i32.sub (local.get $n) (local.get $i)) ${i32(2)})))))
`;
}

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
  const helpers = parseHelpers(expF32x4 + erfF32x4 + geluMap);
  parts.push(whereRows, inlineHelpers(lanes('gelu', 'gelu4', 1), helpers));
  parts.push(inlineHelpers(lanes('gelu_grad', 'geluGrad4', 2), helpers));
  parts.push(inlineHelpers(softmax, helpers), softmaxBackward, reduceSum);
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
