// The WAT of the matmul module's `pack` function (matmul-wat.mjs puts it in the module): lays a
// matrix out as the panels the register tile reads. See [Note: the WASM SIMD matmul].

// i8x16.shuffle's byte indices for four f32 lanes: 0-3 from the first operand, 4-7 the second.
const lanes = (picks) =>
  picks.map((lane) => [0, 1, 2, 3].map((byte) => lane * 4 + byte).join(' ')).join(' ');
const shuffle = (picks, x, y) =>
  `(i8x16.shuffle ${lanes(picks)} (local.get $${x}) (local.get $${y}))`;
// The 4x4 transpose: rows r0-r3 (a lane's 4 t each) interleaved in pairs into x0-x3, then `out[j]`
// is t step j's 4 lanes.
const interleave = (indent) =>
  [
    `(local.set $x0 ${shuffle([0, 4, 1, 5], 'r0', 'r1')})`,
    `(local.set $x1 ${shuffle([2, 6, 3, 7], 'r0', 'r1')})`,
    `(local.set $x2 ${shuffle([0, 4, 1, 5], 'r2', 'r3')})`,
    `(local.set $x3 ${shuffle([2, 6, 3, 7], 'r2', 'r3')})`,
  ]
    .map((line) => indent + line)
    .join('\n');
const out = [
  shuffle([0, 1, 4, 5], 'x0', 'x2'),
  shuffle([2, 3, 6, 7], 'x0', 'x2'),
  shuffle([0, 1, 4, 5], 'x1', 'x3'),
  shuffle([2, 3, 6, 7], 'x1', 'x3'),
];

// pack(src, dst, outer, inner, width, so, si): for each panel of `width` lanes along `outer`, for
// each t < inner, for each lane l < width: dst <- src[(o0 + l)*so + t*si], or 0 past `outer`.
// A packs with outer = m (so, si = A's row and k strides); B with outer = n. A full panel (width
// a multiple of 4, no lane past `outer`) takes one of two SIMD paths, and what they leave (the
// last panel, t past the last block of 4) the scalar loop does:
// - lanes contiguous (so = 1: B as stored, or A transposed): each t copies `width` floats, 16
//   bytes at a time; where 16 lanes remain and the width is 4 or 8, 16 lanes at once (4 panels of
//   4, or 2 of 8), so each t reads one 64-byte run of src once and writes a vector to each panel.
//   Panel by panel, the same source line was read 4 (or 2) times, a stride of si floats apart
//   each time, and the loop's bookkeeping ran per 16 bytes: 1.7-2.8x slower on the default GPT's
//   and n = 1024's operands (issue 49, 2026-11-28: A transposed 1024 x 1024 1646 -> 589 us, B
//   as stored 1162 -> 624 us, 512 x 64 transposed 18.0 -> 8.7 us; the same bytes);
// - t contiguous (si = 1: A as stored, or B transposed): 4 lanes x 4 t are loaded as 4 vectors
//   (one per lane, along t), transposed with 8 shuffles and stored as 4 vectors (one per t).
// Either way every element is copied, never computed on, so the panels are the scalar loop's bits.
// `simd: false` leaves the scalar loop alone (the module before the SIMD paths, for the bench).
export const packWat = ({
  simd = true,
} = {}) => `  ;; Pack a matrix into panels of \`width\` lanes along \`outer\`, \`inner\` deep, zero-padded.
  ;; Element (o, t) is at src + (o*so + t*si)*4: strides in elements handle transposes.
  (func $pack (export "pack") (param $src i32) (param $dst i32) (param $outer i32) (param $inner i32)
    (param $width i32) (param $so i32) (param $si i32)
    (local $o0 i32) (local $t i32) (local $l i32) (local $o i32) (local $p i32) (local $q i32)
    (local $full i32) (local $rowBytes i32) (local $panelBytes i32) (local $siBytes i32)
    (local $group i32) (local $d1 i32) (local $d2 i32) (local $d3 i32)
    (local $r0 v128) (local $r1 v128) (local $r2 v128) (local $r3 v128)
    (local $x0 v128) (local $x1 v128) (local $x2 v128) (local $x3 v128)
    (local.set $rowBytes (i32.shl (local.get $so) (i32.const 2)))
    (local.set $panelBytes (i32.shl (local.get $width) (i32.const 2)))
    (block $pd (loop $pl
      (br_if $pd (i32.ge_u (local.get $o0) (local.get $outer)))
      (local.set $t (i32.const 0))
      (local.set $full ${
        simd
          ? `(i32.and
        (i32.le_u (i32.add (local.get $o0) (local.get $width)) (local.get $outer))
        (i32.eqz (i32.and (local.get $width) (i32.const 3))))`
          : '(i32.const 0)'
      })
      (if (i32.and (local.get $full) (i32.eq (local.get $so) (i32.const 1)))
        (then
          ;; lanes contiguous: one row of the panel per t, read at p, which steps si floats a t
          (local.set $p (i32.add (local.get $src) (i32.shl (local.get $o0) (i32.const 2))))
          (local.set $siBytes (i32.shl (local.get $si) (i32.const 2)))
          (if (i32.and (i32.le_u (i32.add (local.get $o0) (i32.const 16)) (local.get $outer))
                (i32.or (i32.eq (local.get $width) (i32.const 4)) (i32.eq (local.get $width) (i32.const 8))))
            (then
              ;; 16 lanes at once (4 panels of 4, or 2 of 8): each t reads one 64-byte run of src
              ;; and writes its 4 vectors to their panels, which lie $group bytes apart
              (local.set $group (i32.mul (local.get $inner) (local.get $panelBytes)))
              (if (i32.eq (local.get $width) (i32.const 4))
                (then
                  (local.set $d1 (local.get $group))
                  (local.set $d2 (i32.shl (local.get $group) (i32.const 1)))
                  (local.set $d3 (i32.mul (local.get $group) (i32.const 3))))
                (else
                  (local.set $d1 (i32.const 16))
                  (local.set $d2 (local.get $group))
                  (local.set $d3 (i32.add (local.get $group) (i32.const 16)))))
              (local.set $q (local.get $dst))
              (block $gd (loop $gl
                (br_if $gd (i32.ge_u (local.get $t) (local.get $inner)))
                (v128.store (local.get $q) (v128.load (local.get $p)))
                (v128.store (i32.add (local.get $q) (local.get $d1)) (v128.load offset=16 (local.get $p)))
                (v128.store (i32.add (local.get $q) (local.get $d2)) (v128.load offset=32 (local.get $p)))
                (v128.store (i32.add (local.get $q) (local.get $d3)) (v128.load offset=48 (local.get $p)))
                (local.set $p (i32.add (local.get $p) (local.get $siBytes)))
                (local.set $q (i32.add (local.get $q) (local.get $panelBytes)))
                (local.set $t (i32.add (local.get $t) (i32.const 1)))
                (br $gl)))
              ;; past the group's panels; the panel loop's step makes o0 move by 16
              (local.set $dst (i32.add (local.get $dst) (i32.mul (local.get $group)
                (i32.div_u (i32.const 16) (local.get $width)))))
              (local.set $o0 (i32.add (local.get $o0) (i32.sub (i32.const 16) (local.get $width))))))
          (if (i32.eq (local.get $width) (i32.const 4))
            (then
              (block $c4d (loop $c4l
                (br_if $c4d (i32.ge_u (local.get $t) (local.get $inner)))
                (v128.store (local.get $dst) (v128.load (local.get $p)))
                (local.set $p (i32.add (local.get $p) (local.get $siBytes)))
                (local.set $dst (i32.add (local.get $dst) (i32.const 16)))
                (local.set $t (i32.add (local.get $t) (i32.const 1)))
                (br $c4l))))
            (else (if (i32.eq (local.get $width) (i32.const 8))
              (then
                (block $c8d (loop $c8l
                  (br_if $c8d (i32.ge_u (local.get $t) (local.get $inner)))
                  (v128.store (local.get $dst) (v128.load (local.get $p)))
                  (v128.store offset=16 (local.get $dst) (v128.load offset=16 (local.get $p)))
                  (local.set $p (i32.add (local.get $p) (local.get $siBytes)))
                  (local.set $dst (i32.add (local.get $dst) (i32.const 32)))
                  (local.set $t (i32.add (local.get $t) (i32.const 1)))
                  (br $c8l))))
              (else
                (block $cd (loop $cl
                  (br_if $cd (i32.ge_u (local.get $t) (local.get $inner)))
                  (local.set $l (i32.const 0))
                  (block $vd (loop $vl
                    (br_if $vd (i32.ge_u (local.get $l) (local.get $panelBytes)))
                    (v128.store (i32.add (local.get $dst) (local.get $l))
                      (v128.load (i32.add (local.get $p) (local.get $l))))
                    (local.set $l (i32.add (local.get $l) (i32.const 16)))
                    (br $vl)))
                  (local.set $p (i32.add (local.get $p) (local.get $siBytes)))
                  (local.set $dst (i32.add (local.get $dst) (local.get $panelBytes)))
                  (local.set $t (i32.add (local.get $t) (i32.const 1)))
                  (br $cl))))))))
        (else (if (i32.and (local.get $full) (i32.eq (local.get $si) (i32.const 1)))
          (then
            ;; t contiguous: 4 lanes x 4 t at a time, transposed; a panel of 4 (A) walks its 4
            ;; rows with two pointers, its 4 vectors stored side by side
            (if (i32.eq (local.get $width) (i32.const 4))
              (then
                (local.set $p (i32.add (local.get $src)
                  (i32.shl (i32.mul (local.get $o0) (local.get $so)) (i32.const 2))))
                (local.set $q (i32.add (local.get $p) (i32.shl (local.get $rowBytes) (i32.const 1))))
                (block $wd (loop $wl
                  (br_if $wd (i32.gt_u (i32.add (local.get $t) (i32.const 4)) (local.get $inner)))
                  (local.set $r0 (v128.load (local.get $p)))
                  (local.set $r1 (v128.load (i32.add (local.get $p) (local.get $rowBytes))))
                  (local.set $r2 (v128.load (local.get $q)))
                  (local.set $r3 (v128.load (i32.add (local.get $q) (local.get $rowBytes))))
${interleave('                  ')}
                  (v128.store (local.get $dst) ${out[0]})
                  (v128.store offset=16 (local.get $dst) ${out[1]})
                  (v128.store offset=32 (local.get $dst) ${out[2]})
                  (v128.store offset=48 (local.get $dst) ${out[3]})
                  (local.set $p (i32.add (local.get $p) (i32.const 16)))
                  (local.set $q (i32.add (local.get $q) (i32.const 16)))
                  (local.set $dst (i32.add (local.get $dst) (i32.const 64)))
                  (local.set $t (i32.add (local.get $t) (i32.const 4)))
                  (br $wl)))))
            (block $td (loop $tl
              (br_if $td (i32.gt_u (i32.add (local.get $t) (i32.const 4)) (local.get $inner)))
              (local.set $l (i32.const 0))
              (block $gd (loop $gl
                (br_if $gd (i32.ge_u (local.get $l) (local.get $width)))
                (local.set $p (i32.add (local.get $src) (i32.shl (i32.add
                  (i32.mul (i32.add (local.get $o0) (local.get $l)) (local.get $so)) (local.get $t))
                  (i32.const 2))))
                (local.set $r0 (v128.load (local.get $p)))
                (local.set $r1 (v128.load (i32.add (local.get $p) (local.get $rowBytes))))
                (local.set $p (i32.add (local.get $p) (i32.shl (local.get $rowBytes) (i32.const 1))))
                (local.set $r2 (v128.load (local.get $p)))
                (local.set $r3 (v128.load (i32.add (local.get $p) (local.get $rowBytes))))
${interleave('                ')}
                (local.set $q (i32.add (local.get $dst) (i32.shl (local.get $l) (i32.const 2))))
                (v128.store (local.get $q) ${out[0]})
                (local.set $q (i32.add (local.get $q) (local.get $panelBytes)))
                (v128.store (local.get $q) ${out[1]})
                (local.set $q (i32.add (local.get $q) (local.get $panelBytes)))
                (v128.store (local.get $q) ${out[2]})
                (local.set $q (i32.add (local.get $q) (local.get $panelBytes)))
                (v128.store (local.get $q) ${out[3]})
                (local.set $l (i32.add (local.get $l) (i32.const 4)))
                (br $gl)))
              (local.set $dst (i32.add (local.get $dst) (i32.shl (local.get $panelBytes) (i32.const 2))))
              (local.set $t (i32.add (local.get $t) (i32.const 4)))
              (br $tl)))))))
      ;; the scalar loop: whatever t the SIMD paths left (all of a partial panel)
      (block $sd (loop $sl
        (br_if $sd (i32.ge_u (local.get $t) (local.get $inner)))
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
        (br $sl)))
      (local.set $o0 (i32.add (local.get $o0) (local.get $width)))
      (br $pl))))
`;
