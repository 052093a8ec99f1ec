// WAT of causal attention's heads in one call each way ([Note: attention's heads in one call] in
// attention-kernel.ts), for matmul-wat.mjs, which puts it in the matmul's module (plain or fused
// multiply-add, as its gemm) with the kernels module's softmax and its gradient.
import { softmax, softmaxBackward } from './kernels-wat-softmax.mjs';
import { inlineTranscendentals } from './kernels-wat-gelu.mjs';

// The kernels module's exported functions, as functions of this module's own (not exported).
const internal = (text, name) => {
  const head = `(func (export "${name}")`;
  if (!text.includes(head)) throw new Error(`attention-wat: no ${name} in the kernels' WAT`);
  return text.replace(head, `(func $${name}`);
};

const local = (name) => `(local.get $${name})`;
// Byte address of float `index` (an expression) from byte address `base` (an expression).
const addr = (base, index) => `(i32.add ${base} (i32.shl ${index} (i32.const 2)))`;
const mul = (a, b) => `(i32.mul ${a} ${b})`;
const add = (a, b) => `(i32.add ${a} ${b})`;

/**
 * `$mm`: C[i][j] = sum over s < k, in s order from 0, of A[i aRow + s aCol] B[s bRow + j], each
 * step one multiply and one add (`madd`: the gemm's own expression, plain or fused), for m rows
 * in fours and n columns in fours; strides in floats. Every element of C is summed as the gemm
 * sums it (([0 + a0 b0] + a1 b1) + ...: [Note: the WASM SIMD matmul]), so with the same operands
 * it has the gemm's bits, whatever the strides. Four rows at a time, two column vectors where n
 * allows, so that eight sums are in flight.
 */
function mmFunction(madd) {
  const rows = [0, 1, 2, 3];
  const vecs = [0, 1];
  const accs = rows.flatMap((r) => vecs.map((v) => `(local $c${r}_${v} v128)`)).join(' ');
  // Row r's A value at step s: at pa + r aRow (bytes); B's vectors at pb.
  const rowA = [
    '(local.get $pa)',
    '(i32.add (local.get $pa) (local.get $r1))',
    '(i32.add (local.get $pa) (local.get $r2))',
    '(i32.add (local.get $pa) (local.get $r3))',
  ];
  const tile = (width) => {
    const used = vecs.slice(0, width);
    const zero = rows
      .flatMap((r) => used.map((v) => `(local.set $c${r}_${v} (v128.const i32x4 0 0 0 0))`))
      .join('\n            ');
    const step = [
      ...used.map((v) => `(local.set $b${v} (v128.load offset=${16 * v} (local.get $pb)))`),
      ...rows.flatMap((r) => [
        `(local.set $av (v128.load32_splat ${rowA[r]}))`,
        ...used.map((v) => madd(`$c${r}_${v}`, '(local.get $av)', `(local.get $b${v})`)),
      ]),
    ].join('\n              ');
    const store = rows
      .flatMap((r) =>
        used.map(
          (v) =>
            `(v128.store offset=${16 * v} (i32.add (local.get $pc) (i32.mul (i32.const ${r}) (local.get $cRow4))) (local.get $c${r}_${v}))`,
        ),
      )
      .join('\n            ');
    return `${zero}
            (local.set $pa ${addr(local('a'), mul(local('i'), local('aRow')))})
            (local.set $pb ${addr(local('b'), local('j'))})
            (local.set $s (i32.const 0))
            (block $sd${width} (loop $sl${width}
              (br_if $sd${width} (i32.ge_u (local.get $s) (local.get $k)))
              ${step}
              (local.set $pa (i32.add (local.get $pa) (local.get $aCol4)))
              (local.set $pb (i32.add (local.get $pb) (local.get $bRow4)))
              (local.set $s (i32.add (local.get $s) (i32.const 1)))
              (br $sl${width})))
            (local.set $pc ${addr(local('c'), add(mul(local('i'), local('cRow')), local('j')))})
            ${store}`;
  };
  return `  (func $mm (param $a i32) (param $aRow i32) (param $aCol i32) (param $b i32) (param $bRow i32)
    (param $c i32) (param $cRow i32) (param $m i32) (param $k i32) (param $n i32)
    (local $i i32) (local $j i32) (local $s i32) (local $pa i32) (local $pb i32) (local $pc i32)
    (local $r1 i32) (local $r2 i32) (local $r3 i32) (local $aCol4 i32) (local $bRow4 i32) (local $cRow4 i32)
    (local $av v128) (local $b0 v128) (local $b1 v128) ${accs}
    (local.set $r1 (i32.shl (local.get $aRow) (i32.const 2)))
    (local.set $r2 (i32.shl (local.get $aRow) (i32.const 3)))
    (local.set $r3 (i32.add (local.get $r1) (local.get $r2)))
    (local.set $aCol4 (i32.shl (local.get $aCol) (i32.const 2)))
    (local.set $bRow4 (i32.shl (local.get $bRow) (i32.const 2)))
    (local.set $cRow4 (i32.shl (local.get $cRow) (i32.const 2)))
    (block $id (loop $il
      (br_if $id (i32.ge_u (local.get $i) (local.get $m)))
      (local.set $j (i32.const 0))
      (block $jd (loop $jl
        (br_if $jd (i32.gt_u (i32.add (local.get $j) (i32.const 8)) (local.get $n)))
            ${tile(2)}
        (local.set $j (i32.add (local.get $j) (i32.const 8)))
        (br $jl)))
      (if (i32.lt_u (local.get $j) (local.get $n))
        (then
            ${tile(1)}))
      (local.set $i (i32.add (local.get $i) (i32.const 4)))
      (br $il))))
`;
}

// `$transpose`: dst[s][j] = src[j row + s] for j < rows, s < cols (dst rows of `rows` floats).
const transpose = `  (func $transpose (param $src i32) (param $row i32) (param $dst i32) (param $rows i32) (param $cols i32)
    (local $j i32) (local $s i32)
    (block $jd (loop $jl
      (br_if $jd (i32.ge_u (local.get $j) (local.get $rows)))
      (local.set $s (i32.const 0))
      (block $sd (loop $sl
        (br_if $sd (i32.ge_u (local.get $s) (local.get $cols)))
        (f32.store ${addr(local('dst'), add(mul(local('s'), local('rows')), local('j')))}
          (f32.load ${addr(local('src'), add(mul(local('j'), local('row')), local('s')))}))
        (local.set $s (i32.add (local.get $s) (i32.const 1)))
        (br $sl)))
      (local.set $j (i32.add (local.get $j) (i32.const 1)))
      (br $jl))))
`;

// `$mask_scale`: x[i] = x[i] * scale, or `fill` where mask[i] != 0 (NaN counts, as where_rows's
// test does), over n floats (a multiple of 4). The forward scales then masks, the gradient masks
// (to 0) then scales: one pass gives both, a masked element being `fill` either way (0 * scale is
// +0 for the positive scale the kernel takes). The scale as the kernels module's mul_vf computes
// it (f32 lanes, for a scale that is an f32: `f32Scale` 1) or mul_vs (f64 lanes, rounded once).
const maskScale = `  (func $mask_scale (param $x i32) (param $mask i32) (param $n i32) (param $fill f32)
    (param $scale f64) (param $f32Scale i32)
    (local $i i32) (local $v v128) (local $m v128) (local $s4 v128) (local $s2 v128) (local $fill4 v128)
    (local.set $s4 (f32x4.splat (f32.demote_f64 (local.get $scale))))
    (local.set $s2 (f64x2.splat (local.get $scale)))
    (local.set $fill4 (f32x4.splat (local.get $fill)))
    (block $d (loop $l
      (br_if $d (i32.ge_u (local.get $i) (local.get $n)))
      (local.set $v (v128.load ${addr(local('x'), local('i'))}))
      (local.set $m (f32x4.ne (v128.load ${addr(local('mask'), local('i'))}) (v128.const f32x4 0 0 0 0)))
      (if (local.get $f32Scale)
        (then (local.set $v (f32x4.mul (local.get $v) (local.get $s4))))
        (else (local.set $v (i8x16.shuffle 0 1 2 3 4 5 6 7 16 17 18 19 20 21 22 23
          (f32x4.demote_f64x2_zero (f64x2.mul (f64x2.promote_low_f32x4 (local.get $v)) (local.get $s2)))
          (f32x4.demote_f64x2_zero (f64x2.mul (f64x2.promote_low_f32x4
            (i8x16.shuffle 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 (local.get $v) (local.get $v))) (local.get $s2)))))))
      (v128.store ${addr(local('x'), local('i'))} (v128.bitselect (local.get $fill4) (local.get $v) (local.get $m)))
      (local.set $i (i32.add (local.get $i) (i32.const 4)))
      (br $l))))
`;

// The addresses of pair p's head h of batch element b: q's first float, and y's (or dy's).
const pairBases = `(local.set $b (i32.div_u (local.get $p) (local.get $nh)))
      (local.set $h (i32.rem_u (local.get $p) (local.get $nh)))
      (local.set $q ${addr(local('qkv'), add(mul(mul(local('b'), local('t')), local('row3')), mul(local('h'), local('hs'))))})
      (local.set $kh ${addr(local('q'), local('c'))})
      (local.set $vh ${addr(local('kh'), local('c'))})
      (local.set $at ${addr(local('att'), mul(mul(local('p'), local('t')), local('t')))})
      (local.set $yh ${addr(local('y'), add(mul(mul(local('b'), local('t')), local('c')), mul(local('h'), local('hs'))))})`;

const pairLocals =
  '(local $p i32) (local $b i32) (local $h i32) (local $c i32) (local $row3 i32) (local $tt i32) (local $q i32) (local $kh i32) (local $vh i32) (local $at i32) (local $yh i32)';

// attention_forward: for the pairs (batch element, head) p0 <= p < p1 of qkv [B, T, 3C] (row-major,
// C = nh hs), att[p] = softmax(maskedFill(q k^T * scale, mask, -inf)) and y[b, :, h hs ...] =
// att[p] v. `work` holds k^T (hs x T floats). T and hs are multiples of 4.
const forward = `  (func (export "attention_forward") (param $qkv i32) (param $mask i32) (param $att i32) (param $y i32)
    (param $work i32) (param $p0 i32) (param $p1 i32) (param $nh i32) (param $t i32) (param $hs i32)
    (param $scale f64) (param $f32Scale i32)
    ${pairLocals}
    (local.set $c (i32.mul (local.get $nh) (local.get $hs)))
    (local.set $row3 (i32.mul (local.get $c) (i32.const 3)))
    (local.set $tt (i32.mul (local.get $t) (local.get $t)))
    (local.set $p (local.get $p0))
    (block $pd (loop $pl
      (br_if $pd (i32.ge_u (local.get $p) (local.get $p1)))
      ${pairBases}
      (call $transpose (local.get $kh) (local.get $row3) (local.get $work) (local.get $t) (local.get $hs))
      (call $mm (local.get $q) (local.get $row3) (i32.const 1) (local.get $work) (local.get $t)
        (local.get $at) (local.get $t) (local.get $t) (local.get $hs) (local.get $t))
      (call $mask_scale (local.get $at) (local.get $mask) (local.get $tt) (f32.const -inf)
        (local.get $scale) (local.get $f32Scale))
      (call $softmax (local.get $at) (local.get $at) (local.get $t) (local.get $t))
      (call $mm (local.get $at) (local.get $t) (i32.const 1) (local.get $vh) (local.get $row3)
        (local.get $yh) (local.get $c) (local.get $t) (local.get $t) (local.get $hs))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br $pl))))
`;

// attention_backward: for the same pairs, from att (the forward's), dy [B, T, C] (at `y`'s
// place) and qkv, writes q's, k's and v's gradients into their windows of dqkv [B, T, 3C]. `work`
// holds v^T (hs x T floats) and then the scores' gradient (T x T).
const backward = `  (func (export "attention_backward") (param $qkv i32) (param $mask i32) (param $att i32) (param $y i32)
    (param $dqkv i32) (param $work i32) (param $p0 i32) (param $p1 i32) (param $nh i32) (param $t i32) (param $hs i32)
    (param $scale f64) (param $f32Scale i32)
    ${pairLocals} (local $ds i32) (local $off i32)
    (local.set $c (i32.mul (local.get $nh) (local.get $hs)))
    (local.set $row3 (i32.mul (local.get $c) (i32.const 3)))
    (local.set $tt (i32.mul (local.get $t) (local.get $t)))
    (local.set $ds ${addr(local('work'), mul(local('hs'), local('t')))})
    (local.set $p (local.get $p0))
    (block $pd (loop $pl
      (br_if $pd (i32.ge_u (local.get $p) (local.get $p1)))
      ${pairBases}
      (local.set $off (i32.sub (local.get $q) (local.get $qkv)))
      (call $transpose (local.get $vh) (local.get $row3) (local.get $work) (local.get $t) (local.get $hs))
      ;; d att = dy v^T; dv = att^T dy
      (call $mm (local.get $yh) (local.get $c) (i32.const 1) (local.get $work) (local.get $t)
        (local.get $ds) (local.get $t) (local.get $t) (local.get $hs) (local.get $t))
      (call $mm (local.get $at) (i32.const 1) (local.get $t) (local.get $yh) (local.get $c)
        ${addr(add(local('dqkv'), local('off')), mul(local('c'), '(i32.const 2)'))} (local.get $row3) (local.get $t) (local.get $t) (local.get $hs))
      ;; d scores = where(mask, 0, softmax'(att, d att)) * scale
      (call $softmax_backward (local.get $at) (local.get $ds) (local.get $ds) (local.get $t) (local.get $t))
      (call $mask_scale (local.get $ds) (local.get $mask) (local.get $tt) (f32.const 0)
        (local.get $scale) (local.get $f32Scale))
      ;; dq = d scores k; dk = d scores^T q
      (call $mm (local.get $ds) (local.get $t) (i32.const 1) (local.get $kh) (local.get $row3)
        (i32.add (local.get $dqkv) (local.get $off)) (local.get $row3) (local.get $t) (local.get $t) (local.get $hs))
      (call $mm (local.get $ds) (i32.const 1) (local.get $t) (local.get $q) (local.get $row3)
        ${addr(add(local('dqkv'), local('off')), local('c'))} (local.get $row3) (local.get $t) (local.get $t) (local.get $hs))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br $pl))))
`;

/**
 * The attention functions' WAT, given the gemm's multiply-add: `madd(acc, a, b)` is the text that
 * sets local `acc` to acc + a b as the gemm's register tile does.
 */
export function attentionWat(madd) {
  return (
    inlineTranscendentals(internal(softmax, 'softmax')) +
    internal(softmaxBackward, 'softmax_backward') +
    mmFunction(madd) +
    transpose +
    maskScale +
    forward +
    backward
  );
}
