import type { StridedOperand } from '../backend/backend.js';
import { distinctElements } from '../backend/strided-layout.js';
import { shapeSize, Tensor } from '../tensor.js';

// Windows of tensors read as batches of matrices, and their product into another's window: the
// kernel call of `matmulViews` (matmul-views.ts) and of its gradient, which records nothing.

/** A window of a tensor's elements read (or written) as a batch of matrices. */
export interface MatrixView {
  /** Elements from the tensor's first element to the window's first. */
  readonly offset: number;
  /** [...batch, rows, cols]. */
  readonly shape: readonly number[];
  /** Elements between neighbours along each dim of `shape` (>= 0; 0 repeats). */
  readonly strides: readonly number[];
}

/** The view of a's transpose: its last two dims swapped. */
export function transposeView(view: MatrixView): MatrixView {
  const r = view.shape.length;
  const swap = (xs: readonly number[]) => [...xs.slice(0, r - 2), xs[r - 1]!, xs[r - 2]!];
  return { offset: view.offset, shape: swap(view.shape), strides: swap(view.strides) };
}

function operand(t: Tensor, view: MatrixView, op: string): StridedOperand {
  const k = t.kernel(op);
  return {
    storage: k.storage,
    offset: k.offset + view.offset,
    dtype: k.dtype,
    strides: view.strides,
  };
}

function contiguousStrides(shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length);
  let stride = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = stride;
    stride *= shape[i]!;
  }
  return strides;
}

/**
 * out's window `outView` = (or += when `accumulate`) a's window times b's, batch by batch; the
 * views are checked by the caller. No autograd: `matmulViews` records, its gradient calls this.
 */
export function matmulViewsInto(
  a: Tensor,
  aView: MatrixView,
  b: Tensor,
  bView: MatrixView,
  out: Tensor,
  outView: MatrixView,
  accumulate: boolean,
): void {
  const r = aView.shape.length;
  const batch = aView.shape.slice(0, r - 2);
  const [m, k] = [aView.shape[r - 2]!, aView.shape[r - 1]!];
  const n = bView.shape[r - 1]!;
  if (shapeSize(outView.shape) === 0) return;
  const backend = out.backend;
  const op = 'matmulViews';
  if (backend.matmulStrided !== undefined) {
    const [ak, bk, ok] = [operand(a, aView, op), operand(b, bView, op), operand(out, outView, op)];
    if (backend.matmulStrided(ak, bk, ok, batch, m, k, n, accumulate) !== false) return;
  }
  // Fallback (no `matmulStrided`, or one that declined the call): contiguous copies, one batched
  // matmul, the product copied (or added) back.
  const count = shapeSize(batch);
  const dtype = out.dtype;
  const temps: Tensor[] = [];
  const temp = (shape: number[]): Tensor => {
    const t = Tensor.empty(backend, shape, dtype);
    temps.push(t);
    return t;
  };
  const flat = (t: Tensor, shape: readonly number[], at = 0): StridedOperand => {
    const kt = t.kernel(op);
    return { ...kt, offset: kt.offset + at, strides: contiguousStrides(shape) };
  };
  try {
    const aFlat = temp([count, m, k]);
    const bFlat = temp([count, k, n]);
    const product = temp([count, m, n]);
    if (k === 0) backend.fill(product.kernel(op), 0);
    else {
      backend.copyStrided(operand(a, aView, op), flat(aFlat, aView.shape), aView.shape);
      backend.copyStrided(operand(b, bView, op), flat(bFlat, bView.shape), bView.shape);
      backend.matmul(aFlat.kernel(op), bFlat.kernel(op), product.kernel(op), false, false);
    }
    if (!accumulate) {
      backend.copyStrided(flat(product, outView.shape), operand(out, outView, op), outView.shape);
      return;
    }
    if (distinct(outView)) {
      // Every element once: the window out, the products added, the sums back, three kernels.
      const current = temp([count, m, n]);
      const sum = temp([count, m, n]);
      const window = operand(out, outView, op);
      backend.copyStrided(window, flat(current, outView.shape), outView.shape);
      backend.binary('add', current.kernel(op), product.kernel(op), sum.kernel(op));
      backend.copyStrided(flat(sum, outView.shape), window, outView.shape);
      return;
    }
    // One batch element at a time, so a window that repeats elements receives every product.
    const current = temp([1, m, n]);
    const sum = temp([1, m, n]);
    const matrix = [m, n];
    const rowStrides = outView.strides.slice(r - 2);
    let p = 0;
    forEachOffset(batch, outView.strides, (at) => {
      const window = { ...operand(out, outView, op), strides: rowStrides };
      const target = { ...window, offset: window.offset + at };
      backend.copyStrided(target, flat(current, matrix), matrix);
      const one = {
        ...product.kernel(op),
        offset: product.kernel(op).offset + p * m * n,
        shape: [1, m, n],
      };
      backend.binary('add', current.kernel(op), one, sum.kernel(op));
      backend.copyStrided(flat(sum, matrix), target, matrix);
      p++;
    });
  } finally {
    for (const t of temps) t.free();
  }
}

/** Whether no two elements of a view coincide (dims sorted by stride each step past the last). */
export function distinct(view: MatrixView): boolean {
  return distinctElements(view.shape, view.strides);
}

/** Calls `visit` with the offset of every batch element, row-major. */
function forEachOffset(
  batch: readonly number[],
  strides: readonly number[],
  visit: (at: number) => void,
): void {
  const walk = (d: number, at: number): void => {
    if (d === batch.length) {
      visit(at);
      return;
    }
    for (let i = 0; i < batch[d]!; i++) walk(d + 1, at + i * strides[d]!);
  };
  walk(0, 0);
}
