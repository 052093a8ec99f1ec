import { recordOp } from '../autograd/record.js';
import { DTypeError, ShapeError } from '../errors.js';
import { shapeSize, Tensor } from '../tensor.js';
import { autocastOp } from './autocast-policy.js';
import { distinct, type MatrixView, matmulViewsInto } from './matrix-views.js';
import { backendOf, requireSameDType } from './validate.js';

/**
 * [Note: matmul over strided views]
 * Attention splits [B, T, 3C] into heads [B, nh, T, hs]: every tensor is contiguous, so as
 * permutes that was six copies in forward (q, k, v in, y out) and their six adjoints in backward,
 * 8.6 % of the default GPT's step (issue 49). PyTorch's bmm reads a transposed view through its
 * strides instead; `matmulViews` does the same here: each operand is a window of a contiguous
 * tensor, [...batch, rows, cols] with a stride per dim (q: offset 0 of qkv, strides
 * [T*3C, hs, 3C, 1]; k^T: offset C, strides [T*3C, hs, 1, 3C]), and the output is a window of a
 * new contiguous tensor (y written straight into [B, T, C]'s layout). Its gradient writes dA and dB
 * through the same windows into zeros of the inputs' shapes, accumulating, so q's and k's
 * gradients land in one [B, T, 3C] tensor and no head is ever copied. The backend kernel is
 * `matmulStrided` (the CPU's, and WebGPU's: [Note: the WebGPU strided matmul]); a backend without
 * it, or a call it declines, gets copies into contiguous operands, `matmul` and a copy (and add)
 * back, the work the permutes did before.
 */

function checkInside(op: string, t: Tensor, view: MatrixView, name: string): void {
  const { offset, shape, strides } = view;
  const fits =
    shape.length === strides.length &&
    Number.isInteger(offset) &&
    offset >= 0 &&
    strides.every((s) => Number.isInteger(s) && s >= 0) &&
    shape.every((d) => Number.isInteger(d) && d >= 0);
  if (!fits) {
    throw new ShapeError(
      op,
      [t.shape],
      `${name} view (offset ${offset}, shape [${shape.join(', ')}], strides [${strides.join(', ')}]) needs one integer stride >= 0 per dim`,
    );
  }
  if (shapeSize(shape) === 0) return;
  let last = offset;
  shape.forEach((d, i) => {
    last += (d - 1) * strides[i]!;
  });
  if (last >= t.size) {
    throw new ShapeError(
      op,
      [t.shape],
      `${name} view (offset ${offset}, shape [${shape.join(', ')}], strides [${strides.join(', ')}]) reaches element ${last} of ${t.size}`,
    );
  }
}

/**
 * The `matmulViews` primitive: a new contiguous tensor of `outShape` whose window `outView`
 * ([...batch, m, n]) holds a's window `aView` ([...batch, m, k]) times b's window `bView`
 * ([...batch, k, n]), batch by batch; elements of out outside the window are zero. The
 * windows' batch dims must agree (a stride of 0 repeats a matrix) and out's elements must be
 * distinct. a and b may be one tensor. Records `matmulViews`; see [Note: matmul over strided
 * views].
 */
export function matmulViews(
  a: Tensor,
  aView: MatrixView,
  b: Tensor,
  bView: MatrixView,
  outShape: readonly number[],
  outView: Omit<MatrixView, 'shape'>,
): Tensor {
  if (a === b)
    return autocastOp('matmul', [a], ([ca]) =>
      matmulViewsOf(ca, aView, ca, bView, outShape, outView),
    );
  return autocastOp('matmul', [a, b], ([ca, cb]) =>
    matmulViewsOf(ca, aView, cb, bView, outShape, outView),
  );
}

function matmulViewsOf(
  a: Tensor,
  aView: MatrixView,
  b: Tensor,
  bView: MatrixView,
  outShape: readonly number[],
  outStrides: Omit<MatrixView, 'shape'>,
): Tensor {
  const op = 'matmulViews';
  const backend = backendOf(op, [a, b]);
  const dtype = requireSameDType(op, [a, b]);
  if (dtype === 'i32') throw new DTypeError(op, [a.dtype, b.dtype], 'needs float operands');
  checkInside(op, a, aView, 'a');
  checkInside(op, b, bView, 'b');
  const r = aView.shape.length;
  const batch = aView.shape.slice(0, r - 2);
  const sameBatch = bView.shape.length === r && batch.every((d, i) => bView.shape[i] === d);
  if (r < 2 || !sameBatch || aView.shape[r - 1] !== bView.shape[r - 2]) {
    throw new ShapeError(
      op,
      [aView.shape, bView.shape],
      'views must be [...batch, m, k] and [...batch, k, n] with the same batch dims',
    );
  }
  const outView: MatrixView = {
    ...outStrides,
    shape: [...batch, aView.shape[r - 2]!, bView.shape[r - 1]!],
  };
  const out = Tensor.empty(backend, outShape, dtype);
  try {
    checkInside(op, out, outView, 'out');
    if (!distinct(outView)) {
      throw new ShapeError(op, [outShape], 'the out view repeats elements');
    }
    if (shapeSize(outView.shape) < out.size) backend.fill(out.kernel(op), 0);
    matmulViewsInto(a, aView, b, bView, out, outView, false);
  } catch (error) {
    out.free();
    throw error;
  }
  const same = a === b;
  recordOp(op, same ? [a, null] : [a, b], out, { aView, bView, outView, same });
  return out;
}
