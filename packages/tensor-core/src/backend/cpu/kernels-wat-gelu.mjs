// WAT of the 4-lane transcendental helpers (exp, erf, GELU) and of the GELU maps built on them,
// inlined where they are called: generate-kernels-wasm.mjs assembles the maps and the softmax with
// the other kernels, and matmul-wat.mjs puts the same maps in the matmul's module, whose worker
// threads run them on large arrays ([Note: GELU on the matmul's threads] in gelu-threads.ts).
// The same text in both modules, so the same instructions and the same bits.
import { at, get, i32, loop, splat } from './wat-text.mjs';

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
function inlineHelpers(func, helpers) {
  const locals = [];
  let inlined = 0;
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

const HELPERS = parseHelpers(expF32x4 + erfF32x4 + geluMap);

/** `func` (WAT text of one function) with every call of exp4, erf4 and the GELU helpers inlined. */
export function inlineTranscendentals(func) {
  return inlineHelpers(func, HELPERS);
}

/** The exports `gelu` (x, o, n) and `gelu_grad` (x, dy, o, n), helpers inlined. */
export function geluMaps() {
  return (
    inlineTranscendentals(lanes('gelu', 'gelu4', 1)) +
    inlineTranscendentals(lanes('gelu_grad', 'geluGrad4', 2))
  );
}
