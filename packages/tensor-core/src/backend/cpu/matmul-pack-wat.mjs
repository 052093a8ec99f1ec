// The WAT of the matmul module's `pack` function (matmul-wat.mjs puts it in the module): lays a
// matrix out as the panels the register tile reads. See [Note: the WASM SIMD matmul].

// i8x16.shuffle's byte indices for four f32 lanes: 0-3 from the first operand, 4-7 the second.
const lanes = (picks) =>
  picks.map((lane) => [0, 1, 2, 3].map((byte) => lane * 4 + byte).join(' ')).join(' ');
const shuffle = (picks, x, y) =>
  `(i8x16.shuffle ${lanes(picks)} (local.get $${x}) (local.get $${y}))`;

// pack(src, dst, outer, inner, width, so, si): for each panel of `width` lanes along `outer`, for
// each t < inner, for each lane l < width: dst <- src[(o0 + l)*so + t*si], or 0 past `outer`.
// A packs with outer = m (so, si = A's row and k strides); B with outer = n. A full panel (width
// a multiple of 4, no lane past `outer`) takes one of two SIMD paths, and what they leave (the
// last panel, t past the last block of 4) the scalar loop does:
// - lanes contiguous (so = 1: B as stored, or A transposed): each t copies `width` floats, 16
//   bytes at a time;
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
    (local $full i32) (local $rowBytes i32) (local $panelBytes i32)
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
          ;; lanes contiguous: one row of the panel per t
          (block $cd (loop $cl
            (br_if $cd (i32.ge_u (local.get $t) (local.get $inner)))
            (local.set $p (i32.add (local.get $src) (i32.shl
              (i32.add (local.get $o0) (i32.mul (local.get $t) (local.get $si))) (i32.const 2))))
            (local.set $l (i32.const 0))
            (block $vd (loop $vl
              (br_if $vd (i32.ge_u (local.get $l) (local.get $panelBytes)))
              (v128.store (i32.add (local.get $dst) (local.get $l))
                (v128.load (i32.add (local.get $p) (local.get $l))))
              (local.set $l (i32.add (local.get $l) (i32.const 16)))
              (br $vl)))
            (local.set $dst (i32.add (local.get $dst) (local.get $panelBytes)))
            (local.set $t (i32.add (local.get $t) (i32.const 1)))
            (br $cl))))
        (else (if (i32.and (local.get $full) (i32.eq (local.get $si) (i32.const 1)))
          (then
            ;; t contiguous: 4 lanes x 4 t at a time, transposed
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
                (local.set $x0 ${shuffle([0, 4, 1, 5], 'r0', 'r1')})
                (local.set $x1 ${shuffle([2, 6, 3, 7], 'r0', 'r1')})
                (local.set $x2 ${shuffle([0, 4, 1, 5], 'r2', 'r3')})
                (local.set $x3 ${shuffle([2, 6, 3, 7], 'r2', 'r3')})
                (local.set $q (i32.add (local.get $dst) (i32.shl (local.get $l) (i32.const 2))))
                (v128.store (local.get $q) ${shuffle([0, 1, 4, 5], 'x0', 'x2')})
                (local.set $q (i32.add (local.get $q) (local.get $panelBytes)))
                (v128.store (local.get $q) ${shuffle([2, 3, 6, 7], 'x0', 'x2')})
                (local.set $q (i32.add (local.get $q) (local.get $panelBytes)))
                (v128.store (local.get $q) ${shuffle([0, 1, 4, 5], 'x1', 'x3')})
                (local.set $q (i32.add (local.get $q) (local.get $panelBytes)))
                (v128.store (local.get $q) ${shuffle([2, 3, 6, 7], 'x1', 'x3')})
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
