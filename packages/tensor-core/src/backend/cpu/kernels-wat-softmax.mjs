// WAT of the softmax over rows and of its gradient, for generate-kernels-wasm.mjs, which inlines
// the 4-lane helpers ($exp4) they call and assembles them with the rest of the kernels.
import { at, get, i32, loop, splat } from './wat-text.mjs';

// The f32 lanes 2 and 3 of a vector as f64x2 (softmax sums its exps in f64).
const HIGH = 'i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7';
const high2 = (x) => `(f64x2.promote_low_f32x4 (${HIGH} ${x} ${x}))`;

// ---- softmax over rows ---------------------------------------------------------------------
// Per row: the max (a row of -inf shifts by 0), exp(x - max) by exp4 (the tail through the
// scratch vector), their sum in f64 two lanes at a time, then a divide by it. The row's vectors
// are maxed with `pmax` (one maxps: see exp4), which passes over a NaN where `max` would return it;
// the NaN's own exp is NaN, so its row's sum, and every output of the row, is NaN all the same,
// and rows without NaN shift by the same value (a max of -0 for +0 changes no x - max).
// The tail's scalar `f32.max` keeps Math.max's rule: a few a row.
export const softmax = `  (func (export "softmax") (param $x i32) (param $o i32) (param $rows i32) (param $cols i32)
    (local $r i32) (local $i i32) (local $xr i32) (local $or i32) (local $m v128) (local $max f32)
    (local $e v128) (local $sum v128) (local $total f64) (local $t f32) (local $tail i32)
    ${loop(
      'r',
      'r',
      get('rows'),
      1,
      `(local.set $xr ${at('x', '(i32.mul (local.get $r) (local.get $cols))')})
      (local.set $or ${at('o', '(i32.mul (local.get $r) (local.get $cols))')})
      (local.set $m ${splat('-inf')})
      (local.set $i (i32.const 0))
      ${loop('mv', 'i', get('cols'), 4, `(local.set $m (f32x4.pmax (local.get $m) (v128.load ${at('xr', get('i'))})))`)}
      (local.set $max (f32.max (f32.max (f32x4.extract_lane 0 (local.get $m)) (f32x4.extract_lane 1 (local.get $m)))
        (f32.max (f32x4.extract_lane 2 (local.get $m)) (f32x4.extract_lane 3 (local.get $m)))))
      ${loop('ms', 'i', get('cols'), 1, `(local.set $max (f32.max (local.get $max) (f32.load ${at('xr', get('i'))})))`)}
      (if (f32.eq (local.get $max) (f32.const -inf)) (then (local.set $max (f32.const 0))))
      (local.set $m (f32x4.splat (local.get $max)))
      (local.set $sum (v128.const i64x2 0 0))
      (local.set $i (i32.const 0))
      ${loop(
        'ev',
        'i',
        get('cols'),
        4,
        `(local.set $e (call $exp4 (f32x4.sub (v128.load ${at('xr', get('i'))}) (local.get $m))))
        (v128.store ${at('or', get('i'))} (local.get $e))
        (local.set $sum (f64x2.add (local.get $sum) (f64x2.promote_low_f32x4 (local.get $e))))
        (local.set $sum (f64x2.add (local.get $sum) ${high2('(local.get $e)')}))`,
      )}
      (local.set $total (f64.add (f64x2.extract_lane 0 (local.get $sum)) (f64x2.extract_lane 1 (local.get $sum))))
      (local.set $tail (i32.sub (local.get $cols) (local.get $i)))
      (if (local.get $tail) (then
        (v128.store ${i32(0)} (v128.const i32x4 0 0 0 0))
        (memory.copy ${i32(0)} ${at('xr', get('i'))} (i32.shl (local.get $tail) ${i32(2)}))
        (local.set $e (call $exp4 (f32x4.sub (v128.load ${i32(0)}) (local.get $m))))
        (v128.store ${i32(0)} (local.get $e))
        (memory.copy ${at('or', get('i'))} ${i32(0)} (i32.shl (local.get $tail) ${i32(2)}))
        (local.set $i (i32.const 0))
        ${loop('es', 'i', get('tail'), 1, `(local.set $total (f64.add (local.get $total) (f64.promote_f32 (f32.load ${at('or', `(i32.add (i32.sub (local.get $cols) (local.get $tail)) (local.get $i))`)}))))`)}))
      (local.set $t (f32.demote_f64 (local.get $total)))
      (local.set $m (f32x4.splat (local.get $t)))
      (local.set $i (i32.const 0))
      ${loop('dv', 'i', get('cols'), 4, `(v128.store ${at('or', get('i'))} (f32x4.div (v128.load ${at('or', get('i'))}) (local.get $m)))`)}
      ${loop('ds', 'i', get('cols'), 1, `(f32.store ${at('or', get('i'))} (f32.div (f32.load ${at('or', get('i'))}) (local.get $t)))`)}`,
    )})
`;

// ---- softmax's gradient over rows ----------------------------------------------------------
// [Note: softmax's gradient in one pass] (autograd/softmax-gradient.ts): per row, dot = the f64 sum in
// column order of the f32 products dy y (four products a vector, added one lane at a time, in
// order, as sum_axis adds a row), rounded to f32; then dx = y (dy - dot) in f32 lanes. The same
// roundings in the same order as the mul, sum_axis, sub and mul calls it replaces.
export const softmaxBackward = `  (func (export "softmax_backward") (param $y i32) (param $g i32) (param $o i32) (param $rows i32) (param $cols i32)
    (local $r i32) (local $i i32) (local $yr i32) (local $gr i32) (local $or i32) (local $p v128)
    (local $dot f64) (local $d f32) (local $dv v128)
    ${loop(
      'r',
      'r',
      get('rows'),
      1,
      `(local.set $yr ${at('y', '(i32.mul (local.get $r) (local.get $cols))')})
      (local.set $gr ${at('g', '(i32.mul (local.get $r) (local.get $cols))')})
      (local.set $or ${at('o', '(i32.mul (local.get $r) (local.get $cols))')})
      (local.set $dot (f64.const 0))
      (local.set $i (i32.const 0))
      ${loop(
        'pv',
        'i',
        get('cols'),
        4,
        `(local.set $p (f32x4.mul (v128.load ${at('gr', get('i'))}) (v128.load ${at('yr', get('i'))})))
        ${[0, 1, 2, 3].map((j) => `(local.set $dot (f64.add (local.get $dot) (f64.promote_f32 (f32x4.extract_lane ${j} (local.get $p)))))`).join('\n        ')}`,
      )}
      ${loop('ps', 'i', get('cols'), 1, `(local.set $dot (f64.add (local.get $dot) (f64.promote_f32 (f32.mul (f32.load ${at('gr', get('i'))}) (f32.load ${at('yr', get('i'))})))))`)}
      (local.set $d (f32.demote_f64 (local.get $dot)))
      (local.set $dv (f32x4.splat (local.get $d)))
      (local.set $i (i32.const 0))
      ${loop('dv', 'i', get('cols'), 4, `(v128.store ${at('or', get('i'))} (f32x4.mul (v128.load ${at('yr', get('i'))}) (f32x4.sub (v128.load ${at('gr', get('i'))}) (local.get $dv))))`)}
      ${loop('ds', 'i', get('cols'), 1, `(f32.store ${at('or', get('i'))} (f32.mul (f32.load ${at('yr', get('i'))}) (f32.sub (f32.load ${at('gr', get('i'))}) (local.get $d))))`)}`,
    )})
`;
