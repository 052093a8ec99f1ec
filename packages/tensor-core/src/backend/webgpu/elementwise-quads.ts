import type { DType } from '../../dtype.js';
import { valueType } from './wgsl.js';

/**
 * [Note: element-wise kernels four elements a load]
 *
 * The CPU adapters run a workgroup's invocations as the lanes of SIMD registers and load storage
 * lane by lane ([Note: A's rows shared across a subgroup] in matmul-tiled-wgsl.ts), so an
 * element-wise kernel pays per load, per store and per guarded pass, not per arithmetic
 * operation. Where the output and every tensor operand are 32-bit, start at multiples of 4
 * elements and the output's size is a multiple of 4, the kernel reads and writes `vec4`s instead:
 * each invocation computes two quads (elements 4q .. 4q + 3) in two guarded passes, where the
 * scalar form computes eight elements in eight. A quad's operands are read as one vec4 each:
 * contiguous ones at quad q, a bias over rows (`i % n`, n a multiple of 4) at quad q % (n / 4), a
 * value per row (`i / n`) as one scalar for all four. The element-wise expression is the scalar
 * form's, applied to each of the four components in turn, so every element gets the same
 * operations on the same values: the bits are the scalar form's (`elementwise-quads.test.ts`
 * compares the two on every op). Measured on the 2-core Xeon (2026-11-29, 20 launches a submit):
 * a contiguous add of 32768 floats 719 -> 401 us on SwiftShader and 640 -> 414 us on lavapipe, a
 * bias add over [128, 256] 785 -> 456 and 850 -> 470 us. Launches that do not fit (16-bit
 * operands, odd offsets or sizes, strided broadcasts) keep the scalar form.
 */

/** How a quad reads one tensor operand (`c` contiguous, `row` `i % n`, `col` `i / n`). */
export type QuadRead = 'c' | 'row' | 'col';

/** One operand of a quad body: a tensor read as `read`, or a scalar (`read` null). */
export interface QuadOperand {
  readonly name: string;
  readonly dtype: DType;
  /** Where in prm the tensor's element offset, or the scalar's bits, are. */
  readonly at: number;
  readonly read: QuadRead | null;
}

/** Whether a dtype's elements are one 32-bit word each (readable four to a vec4). */
export function quadDtype(dtype: DType): boolean {
  return dtype === 'f32' || dtype === 'i32';
}

/**
 * Whether a launch can run as quads: a 32-bit output at an offset and of a size that are
 * multiples of 4, and every tensor operand 32-bit at an offset that is a multiple of 4, read
 * contiguously or, with `n` (the broadcast's row length) a multiple of 4, by row or column.
 */
export function quadsFit(
  out: { dtype: DType; offset: number; size: number },
  tensors: readonly { dtype: DType; offset: number; read: QuadRead | 's' }[],
  n: number,
): boolean {
  if (!quadDtype(out.dtype) || out.offset % 4 !== 0 || out.size % 4 !== 0) return false;
  return tensors.every(
    (t) =>
      quadDtype(t.dtype) &&
      t.offset % 4 === 0 &&
      (t.read === 'c' || ((t.read === 'row' || t.read === 'col') && n % 4 === 0)),
  );
}

/**
 * WGSL defining `fn outq(q: u32) -> vec4<T>`: `expr` (in the operands' names) over elements
 * 4q .. 4q + 3. `nAt` is where in prm the broadcast's row length is (for `row` and `col` reads).
 */
export function quadBody(
  operands: readonly QuadOperand[],
  out: DType,
  expr: string,
  nAt = -1,
): string {
  const t = valueType(out);
  const tensors = operands.filter((o) => o.read !== null);
  const params = tensors.map((o) => `${o.name}: ${valueType(o.dtype)}`).join(', ');
  const scalars = operands
    .filter((o) => o.read === null)
    .map((o) => `  let ${o.name} = ${valueType(o.dtype) === 'i32' ? 'pi' : 'pf'}(${o.at}u);\n`)
    .join('');
  const reads = tensors.map((o) => {
    const base = `(prm[${o.at}u] >> 2u)`;
    if (o.read === 'c') return `  let v${o.name} = ${o.name}[${base} + q];`;
    if (o.read === 'row') {
      return `  let v${o.name} = ${o.name}[${base} + q % (prm[${nAt}u] >> 2u)];`;
    }
    const vt = valueType(o.dtype);
    return `  let v${o.name} = vec4<${vt}>(ld_${o.name}(prm[${o.at}u] + (q << 2u) / prm[${nAt}u]));`;
  });
  const lane = (c: string) => `ewv(${tensors.map((o) => `v${o.name}.${c}`).join(', ')})`;
  const result =
    tensors.length === 0
      ? `vec4<${t}>(ewv())`
      : `vec4<${t}>(${['x', 'y', 'z', 'w'].map(lane).join(', ')})`;
  return `fn ewv(${params}) -> ${t} {
${scalars}  return ${expr};
}
fn outq(q: u32) -> vec4<${t}> {
${reads.join('\n')}
  return ${result};
}`;
}
