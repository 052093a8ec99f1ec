// WAT of the kernels that compute in f64 lanes exactly as the TypeScript kernels compute in
// doubles, so their results agree bit for bit: layer norm forward and backward, and the fused
// Adam/AdamW update. generate-kernels-wasm.mjs assembles them with the rest.
//
// Sums along a row are f64 adds in index order, as the TypeScript loops add, two rows at a time
// in the two lanes of an f64x2 ([Note: two rows in two lanes]); everything per element runs two
// lanes of f64x2 at a time. A pair may read one element past a row or an
// array and write one past a row: the loader pads every array, and a row's extra write lands on
// the next row's first element, which that row then writes.

const get = (name) => `(local.get $${name})`;
const f32At = (base, index) => `(i32.add ${get(base)} (i32.shl ${index} (i32.const 2)))`;
const f64At = (base, index) => `(i32.add ${get(base)} (i32.shl ${index} (i32.const 3)))`;
/** Two f32 at `address` as f64x2. */
const pair = (address) => `(f64x2.promote_low_f32x4 (v128.load64_zero ${address}))`;
/** Round an f64x2 to f32 and store both lanes at `address`. */
const storePair = (address, value) =>
  `(v128.store64_lane 0 ${address} (f32x4.demote_f64x2_zero ${value}))`;
const one = (address) => `(f64.promote_f32 (f32.load ${address}))`;

// for ($var = 0; $var < limit; $var += step)
function loop(label, variable, limit, step, body) {
  return `(local.set $${variable} (i32.const 0))
    (block $${label}_done (loop $${label}
      (br_if $${label}_done (i32.ge_u ${get(variable)} ${limit}))
      ${body}
      (local.set $${variable} (i32.add ${get(variable)} (i32.const ${step})))
      (br $${label})))`;
}

// Two rows' sums in the two lanes of an f64x2 ([Note: two rows in two lanes]): element `index`
// of the rows at `base` and `base1` as f64x2 (row base's in lane 0).
const twoRows = (base, base1, index) =>
  `(f64x2.promote_low_f32x4 (v128.load32_lane 1 ${f32At(base1, index)} (v128.load32_zero ${f32At(base, index)})))`;
const lane = (v, i) => `(f64x2.extract_lane ${i} (local.get $${v}))`;
const cols64 = '(f64.convert_i32_u (local.get $cols))';

/**
 * Rows two at a time, then the last one alone: `pair` runs with $r and $r + 1, `single` with $r.
 */
function rowPairs(pair, single) {
  return `(local.set $r (i32.const 0))
    (block $pairs_done (loop $pairs
      (br_if $pairs_done (i32.gt_u (i32.add (local.get $r) (i32.const 2)) (local.get $rows)))
      ${pair}
      (local.set $r (i32.add (local.get $r) (i32.const 2)))
      (br $pairs)))
    (if (i32.lt_u (local.get $r) (local.get $rows)) (then
      ${single}))`;
}

// [Note: two rows in two lanes]
// A row's sums are f64 adds in index order (the TypeScript kernels' order, which keeps the bits),
// so each is one chain of dependent adds: its speed is the add's latency, not its throughput. Two
// rows' sums run in the two lanes of one f64x2 instead, each lane adding its own row's elements
// in index order: the same adds, so the same bits, two rows for the latency of one (layer norm's
// statistics). An odd last row sums alone as before. Measured (tensor-core's README, issue 49):
// layer norm 0.75-0.90 of its time forward and 0.81-0.93 backward from [512, 64] to [16384,
// 768]. Softmax's gradient's dot was tried so too and dropped: 0.84-0.96 where its rows are in
// cache, but 1.05-1.08 at GPT-2's attention (48 MB arrays).

// layer_norm: per row of x, mu = sum / cols, var = sum (x - mu)^2 / cols, rstd = 1 / sqrt(var + eps);
// mean and rstd stored per row, o = (x - mu) rstd [* w] [+ b]. flags: 1 with w, 2 with b.
// The statistics of two rows at a time ([Note: two rows in two lanes]).
const layerNormOut = (
  mu,
  inv,
) => `(local.set $or ${f32At('o', '(i32.mul (local.get $r) (local.get $cols))')})
      (local.set $xr ${f32At('x', '(i32.mul (local.get $r) (local.get $cols))')})
      (f32.store ${f32At('mean', get('r'))} (f32.demote_f64 ${mu}))
      (f32.store ${f32At('rstd', get('r'))} (f32.demote_f64 ${inv}))
      (local.set $mu2 (f64x2.splat ${mu}))
      (local.set $inv2 (f64x2.splat ${inv}))
      ${loop(
        'y',
        'c',
        get('cols'),
        2,
        `(local.set $y (f64x2.mul (f64x2.sub ${pair(f32At('xr', get('c')))} (local.get $mu2)) (local.get $inv2)))
        (if (i32.and (local.get $flags) (i32.const 1)) (then (local.set $y (f64x2.mul (local.get $y) ${pair(f32At('w', get('c')))}))))
        (if (i32.and (local.get $flags) (i32.const 2)) (then (local.set $y (f64x2.add (local.get $y) ${pair(f32At('b', get('c')))}))))
        ${storePair(f32At('or', get('c')), '(local.get $y)')}`,
      )}`;
export const layerNorm = `  (func (export "layer_norm") (param $x i32) (param $w i32) (param $b i32) (param $o i32)
    (param $mean i32) (param $rstd i32) (param $rows i32) (param $cols i32) (param $eps f64) (param $flags i32)
    (local $r i32) (local $c i32) (local $xr i32) (local $xr1 i32) (local $or i32) (local $sum f64) (local $mu f64)
    (local $d f64) (local $inv f64) (local $mu2 v128) (local $inv2 v128) (local $y v128)
    (local $s2 v128) (local $d2 v128) (local $m2 v128) (local $i2 v128)
    ${rowPairs(
      `(local.set $xr ${f32At('x', '(i32.mul (local.get $r) (local.get $cols))')})
      (local.set $xr1 ${f32At('xr', get('cols'))})
      (local.set $s2 (v128.const i64x2 0 0))
      ${loop('s2', 'c', get('cols'), 1, `(local.set $s2 (f64x2.add (local.get $s2) ${twoRows('xr', 'xr1', get('c'))}))`)}
      (local.set $m2 (f64x2.div (local.get $s2) (f64x2.splat ${cols64})))
      (local.set $s2 (v128.const i64x2 0 0))
      ${loop(
        'q2',
        'c',
        get('cols'),
        1,
        `(local.set $d2 (f64x2.sub ${twoRows('xr', 'xr1', get('c'))} (local.get $m2)))
        (local.set $s2 (f64x2.add (local.get $s2) (f64x2.mul (local.get $d2) (local.get $d2))))`,
      )}
      (local.set $i2 (f64x2.div (f64x2.splat (f64.const 1)) (f64x2.sqrt (f64x2.add (f64x2.div (local.get $s2) (f64x2.splat ${cols64})) (f64x2.splat (local.get $eps))))))
      ${layerNormOut(lane('m2', 0), lane('i2', 0))}
      (local.set $r (i32.add (local.get $r) (i32.const 1)))
      ${layerNormOut(lane('m2', 1), lane('i2', 1))}
      (local.set $r (i32.sub (local.get $r) (i32.const 1)))`,
      `(local.set $xr ${f32At('x', '(i32.mul (local.get $r) (local.get $cols))')})
      (local.set $sum (f64.const 0))
      ${loop('s', 'c', get('cols'), 1, `(local.set $sum (f64.add (local.get $sum) ${one(f32At('xr', get('c')))}))`)}
      (local.set $mu (f64.div (local.get $sum) ${cols64}))
      (local.set $sum (f64.const 0))
      ${loop(
        'q',
        'c',
        get('cols'),
        1,
        `(local.set $d (f64.sub ${one(f32At('xr', get('c')))} (local.get $mu)))
        (local.set $sum (f64.add (local.get $sum) (f64.mul (local.get $d) (local.get $d))))`,
      )}
      (local.set $inv (f64.div (f64.const 1) (f64.sqrt (f64.add (f64.div (local.get $sum) ${cols64}) (local.get $eps)))))
      ${layerNormOut('(local.get $mu)', '(local.get $inv)')}`,
    )})
`;

// layer_norm_backward: xhat = (x - mean) rstd, g = dy [* w]; per row dx = rstd (g - mean(g) -
// xhat mean(g xhat)); over all rows dw += dy xhat, db += dy, accumulated in the f64 arrays at dw
// and db (cols + 1 each, zeroed here), row after row. The row sums of two rows at a time
// ([Note: two rows in two lanes]).
const layerNormDx = (
  mu,
  inv,
  meanG,
  meanGX,
) => `(local.set $row (i32.mul (local.get $r) (local.get $cols)))
      (local.set $xr ${f32At('x', get('row'))})
      (local.set $dyr ${f32At('dy', get('row'))})
      (local.set $dxr ${f32At('dx', get('row'))})
      (local.set $mu2 (f64x2.splat ${mu}))
      (local.set $inv2 (f64x2.splat ${inv}))
      (local.set $meanG2 (f64x2.splat ${meanG}))
      (local.set $meanGX2 (f64x2.splat ${meanGX}))
      ${loop(
        'v',
        'c',
        get('cols'),
        2,
        `(local.set $xhat2 (f64x2.mul (f64x2.sub ${pair(f32At('xr', get('c')))} (local.get $mu2)) (local.get $inv2)))
        (local.set $dy2 ${pair(f32At('dyr', get('c')))})
        (local.set $at ${f64At('dw', get('c'))})
        (v128.store (local.get $at) (f64x2.add (v128.load (local.get $at)) (f64x2.mul (local.get $dy2) (local.get $xhat2))))
        (local.set $at ${f64At('db', get('c'))})
        (v128.store (local.get $at) (f64x2.add (v128.load (local.get $at)) (local.get $dy2)))
        (local.set $g2 (if (result v128) (local.get $hasW) (then (f64x2.mul (local.get $dy2) ${pair(f32At('w', get('c')))})) (else (local.get $dy2))))
        ${storePair(
          f32At('dxr', get('c')),
          '(f64x2.mul (local.get $inv2) (f64x2.sub (f64x2.sub (local.get $g2) (local.get $meanG2)) (f64x2.mul (local.get $xhat2) (local.get $meanGX2))))',
        )}`,
      )}`;
const weightOf = (c) =>
  `(if (result f64) (local.get $hasW) (then ${one(f32At('w', c))}) (else (f64.const 1)))`;
export const layerNormBackward = `  (func (export "layer_norm_backward") (param $dy i32) (param $x i32) (param $w i32)
    (param $mean i32) (param $rstd i32) (param $dx i32) (param $dw i32) (param $db i32)
    (param $rows i32) (param $cols i32) (param $hasW i32)
    (local $r i32) (local $c i32) (local $row i32) (local $xr i32) (local $dyr i32) (local $dxr i32)
    (local $xr1 i32) (local $dyr1 i32)
    (local $mu f64) (local $inv f64) (local $xhat f64) (local $g f64) (local $sumG f64) (local $sumGX f64)
    (local $mu2 v128) (local $inv2 v128) (local $xhat2 v128) (local $dy2 v128) (local $g2 v128)
    (local $meanG2 v128) (local $meanGX2 v128) (local $at i32)
    (local $m2 v128) (local $i2 v128) (local $sG2 v128) (local $sGX2 v128)
    (memory.fill (local.get $dw) (i32.const 0) (i32.shl (i32.add (local.get $cols) (i32.const 1)) (i32.const 3)))
    (memory.fill (local.get $db) (i32.const 0) (i32.shl (i32.add (local.get $cols) (i32.const 1)) (i32.const 3)))
    ${rowPairs(
      `(local.set $row (i32.mul (local.get $r) (local.get $cols)))
      (local.set $xr ${f32At('x', get('row'))})
      (local.set $dyr ${f32At('dy', get('row'))})
      (local.set $xr1 ${f32At('xr', get('cols'))})
      (local.set $dyr1 ${f32At('dyr', get('cols'))})
      (local.set $m2 (f64x2.promote_low_f32x4 (v128.load64_zero ${f32At('mean', get('r'))})))
      (local.set $i2 (f64x2.promote_low_f32x4 (v128.load64_zero ${f32At('rstd', get('r'))})))
      (local.set $sG2 (v128.const i64x2 0 0))
      (local.set $sGX2 (v128.const i64x2 0 0))
      ${loop(
        's2',
        'c',
        get('cols'),
        1,
        `(local.set $xhat2 (f64x2.mul (f64x2.sub ${twoRows('xr', 'xr1', get('c'))} (local.get $m2)) (local.get $i2)))
        (local.set $g2 (f64x2.mul ${twoRows('dyr', 'dyr1', get('c'))} (f64x2.splat ${weightOf(get('c'))})))
        (local.set $sG2 (f64x2.add (local.get $sG2) (local.get $g2)))
        (local.set $sGX2 (f64x2.add (local.get $sGX2) (f64x2.mul (local.get $g2) (local.get $xhat2))))`,
      )}
      (local.set $sG2 (f64x2.div (local.get $sG2) (f64x2.splat ${cols64})))
      (local.set $sGX2 (f64x2.div (local.get $sGX2) (f64x2.splat ${cols64})))
      ${layerNormDx(lane('m2', 0), lane('i2', 0), lane('sG2', 0), lane('sGX2', 0))}
      (local.set $r (i32.add (local.get $r) (i32.const 1)))
      ${layerNormDx(lane('m2', 1), lane('i2', 1), lane('sG2', 1), lane('sGX2', 1))}
      (local.set $r (i32.sub (local.get $r) (i32.const 1)))`,
      `(local.set $row (i32.mul (local.get $r) (local.get $cols)))
      (local.set $xr ${f32At('x', get('row'))})
      (local.set $dyr ${f32At('dy', get('row'))})
      (local.set $mu ${one(f32At('mean', get('r')))})
      (local.set $inv ${one(f32At('rstd', get('r')))})
      (local.set $sumG (f64.const 0))
      (local.set $sumGX (f64.const 0))
      ${loop(
        's',
        'c',
        get('cols'),
        1,
        `(local.set $xhat (f64.mul (f64.sub ${one(f32At('xr', get('c')))} (local.get $mu)) (local.get $inv)))
        (local.set $g (f64.mul ${one(f32At('dyr', get('c')))} ${weightOf(get('c'))}))
        (local.set $sumG (f64.add (local.get $sumG) (local.get $g)))
        (local.set $sumGX (f64.add (local.get $sumGX) (f64.mul (local.get $g) (local.get $xhat))))`,
      )}
      ${layerNormDx('(local.get $mu)', '(local.get $inv)', `(f64.div (local.get $sumG) ${cols64})`, `(f64.div (local.get $sumGX) ${cols64})`)}`,
    )})
`;

// adam: the fused Adam/AdamW update of n elements in place (p, m, v), from the gradient g.
// mode: 0 no weight decay, 1 decoupled (p *= decay), 2 L2 (g += wd p). The update of one
// element, all in f64 as the TypeScript kernel: g' = g gradScale [+ wd p]; m' = beta1 m +
// (1 - beta1) g'; v' = beta2 v + (1 - beta2) g' g'; p' = p - stepSize m' / (sqrt(v') / bias2Sqrt
// + eps); m', v', p' rounded to f32 on store.
export const adam = `  (func (export "adam") (param $p i32) (param $g i32) (param $m i32) (param $v i32) (param $n i32)
    (param $gradScale f64) (param $mode i32) (param $wd f64) (param $decay f64)
    (param $beta1 f64) (param $c1 f64) (param $beta2 f64) (param $c2 f64)
    (param $stepSize f64) (param $bias2Sqrt f64) (param $eps f64)
    (local $i i32) (local $p2 v128) (local $g2 v128) (local $m2 v128) (local $v2 v128)
    ${loop(
      'e',
      'i',
      get('n'),
      2,
      `(local.set $p2 ${pair(f32At('p', get('i')))})
      (local.set $g2 (f64x2.mul ${pair(f32At('g', get('i')))} (f64x2.splat (local.get $gradScale))))
      (if (i32.eq (local.get $mode) (i32.const 1))
        (then (local.set $p2 (f64x2.mul (local.get $p2) (f64x2.splat (local.get $decay))))))
      (if (i32.eq (local.get $mode) (i32.const 2))
        (then (local.set $g2 (f64x2.add (local.get $g2) (f64x2.mul (f64x2.splat (local.get $wd)) (local.get $p2))))))
      (local.set $m2 (f64x2.add (f64x2.mul (f64x2.splat (local.get $beta1)) ${pair(f32At('m', get('i')))})
        (f64x2.mul (f64x2.splat (local.get $c1)) (local.get $g2))))
      (local.set $v2 (f64x2.add (f64x2.mul (f64x2.splat (local.get $beta2)) ${pair(f32At('v', get('i')))})
        (f64x2.mul (f64x2.mul (f64x2.splat (local.get $c2)) (local.get $g2)) (local.get $g2))))
      ${storePair(f32At('m', get('i')), '(local.get $m2)')}
      ${storePair(f32At('v', get('i')), '(local.get $v2)')}
      ${storePair(
        f32At('p', get('i')),
        `(f64x2.sub (local.get $p2) (f64x2.div (f64x2.mul (f64x2.splat (local.get $stepSize)) (local.get $m2))
          (f64x2.add (f64x2.div (f64x2.sqrt (local.get $v2)) (f64x2.splat (local.get $bias2Sqrt))) (f64x2.splat (local.get $eps)))))`,
      )}`,
    )})
`;
