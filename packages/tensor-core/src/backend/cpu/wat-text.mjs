// Helpers for writing WAT text, shared by the kernels' generators (generate-kernels-wasm.mjs and
// the kernel families it assembles).

export const get = (name) => `(local.get $${name})`;
export const i32 = (value) => `(i32.const ${value})`;
// The byte address of element `index` (an expression) of the array at `base`.
export const at = (base, index) => `(i32.add ${get(base)} (i32.shl ${index} ${i32(2)}))`;

// A counted loop: `body` runs for $var = from, from + step, ... while $var + step <= limit.
export function loop(label, variable, limit, step, body) {
  return `(block $${label}_done (loop $${label}
      (br_if $${label}_done (i32.gt_u (i32.add ${get(variable)} ${i32(step)}) ${limit}))
      ${body}
      (local.set $${variable} (i32.add ${get(variable)} ${i32(step)}))
      (br $${label})))`;
}

// A v128 of four f32 lanes of `c`.
export const splat = (c) => `(v128.const f32x4 ${c} ${c} ${c} ${c})`;
