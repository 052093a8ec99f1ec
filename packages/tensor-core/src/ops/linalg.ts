import { recordOp } from '../autograd/record.js';
import { ArgumentError, DTypeError, ShapeError } from '../errors.js';
import { shapeSize, Tensor } from '../tensor.js';
import { autocastOp } from './autocast-policy.js';
import { add } from './elementwise.js';
import { expand, reshape } from './shape.js';
import { backendOf, broadcastShapes, requireSameDType, sameShape } from './validate.js';

/** Options of `matmul`. */
export interface MatmulOptions {
  /** Use the transpose of a's last two dims. */
  transposeA?: boolean;
  /** Use the transpose of b's last two dims (`x @ W^T` for a [out, in] weight). */
  transposeB?: boolean;
}

/**
 * The `matmul` primitive: a [Ba, M, K] ([Ba, K, M] if transposeA), b [Bb, K, N] ([Bb, N, K] if
 * transposeB), out [B, M, N] with Ba, Bb each B or 1. Records `matmul`.
 */
export function batchedMatmul(a: Tensor, b: Tensor, options: MatmulOptions = {}): Tensor {
  return autocastOp('matmul', [a, b], ([ca, cb]) => batchedMatmulOf(ca, cb, options));
}

function batchedMatmulOf(a: Tensor, b: Tensor, options: MatmulOptions): Tensor {
  const backend = backendOf('matmul', [a, b]);
  const dtype = requireSameDType('matmul', [a, b]);
  if (dtype === 'i32') throw new DTypeError('matmul', [a.dtype, b.dtype], 'needs float operands');
  const transposeA = options.transposeA ?? false;
  const transposeB = options.transposeB ?? false;
  if (a.rank !== 3 || b.rank !== 3) {
    throw new ShapeError('matmul', [a.shape, b.shape], 'batchedMatmul needs 3-D operands');
  }
  const [ba, a1, a2] = a.shape as [number, number, number];
  const [bb, b1, b2] = b.shape as [number, number, number];
  const [m, k] = transposeA ? [a2, a1] : [a1, a2];
  const [kb, n] = transposeB ? [b2, b1] : [b1, b2];
  if (k !== kb) {
    throw new ShapeError(
      'matmul',
      [a.shape, b.shape],
      `inner dimensions differ (${k} and ${kb}${transposeA || transposeB ? `, transposeA ${transposeA}, transposeB ${transposeB}` : ''})`,
    );
  }
  if (ba !== bb && ba !== 1 && bb !== 1) {
    throw new ShapeError(
      'matmul',
      [a.shape, b.shape],
      `batch sizes ${ba} and ${bb} do not broadcast`,
    );
  }
  const batch = ba === 1 ? bb : ba;
  const out = Tensor.empty(backend, [batch, m, n], dtype);
  if (out.size > 0) {
    backend.matmul(
      a.kernel('matmul'),
      b.kernel('matmul'),
      out.kernel('matmul'),
      transposeA,
      transposeB,
    );
  }
  recordOp('matmul', [a, b], out, { transposeA, transposeB });
  return out;
}

/**
 * Matrix product with `torch.matmul` semantics: 1-D operands are promoted (a vector as a row of a,
 * a column of b) and the added dim removed; operands of rank >= 2 multiply their last two dims and
 * broadcast the batch dims. `transposeA`/`transposeB` transpose the last two dims of a rank >= 2
 * operand without a copy. A composite of `reshape`, `expand` and the `matmul` primitive.
 */
export function matmul(a: Tensor, b: Tensor, options: MatmulOptions = {}): Tensor {
  return autocastOp('matmul', [a, b], ([ca, cb]) => matmulOf(ca, cb, options));
}

function matmulOf(a: Tensor, b: Tensor, options: MatmulOptions): Tensor {
  backendOf('matmul', [a, b]);
  requireSameDType('matmul', [a, b]);
  if (a.rank === 0 || b.rank === 0) {
    throw new ShapeError('matmul', [a.shape, b.shape], 'operands must have at least one dimension');
  }
  const transposeA = options.transposeA ?? false;
  const transposeB = options.transposeB ?? false;
  if ((transposeA && a.rank === 1) || (transposeB && b.rank === 1)) {
    throw new ArgumentError('matmul', 'transposeA/transposeB need an operand of rank >= 2');
  }
  const aMat = a.rank === 1 ? [1, a.shape[0]!] : a.shape.slice(-2);
  const bMat = b.rank === 1 ? [b.shape[0]!, 1] : b.shape.slice(-2);
  const aBatch = a.shape.slice(0, -2);
  const bBatch = b.shape.slice(0, -2);
  const k = transposeA ? aMat[0]! : aMat[1]!;
  const kb = transposeB ? bMat[1]! : bMat[0]!;
  if (k !== kb) {
    throw new ShapeError(
      'matmul',
      [a.shape, b.shape],
      `inner dimensions differ (${k} and ${kb}${transposeA || transposeB ? `, transposeA ${transposeA}, transposeB ${transposeB}` : ''})`,
    );
  }
  const batchShape = broadcastShapes('matmul', [aBatch, bBatch]);
  const batch = shapeSize(batchShape);
  const owned: Tensor[] = [];
  const to3d = (t: Tensor, tBatch: readonly number[], mat: readonly number[]): Tensor => {
    let source = t;
    if (shapeSize(tBatch) !== 1 && !sameShape(tBatch, batchShape)) {
      const padded = [...new Array<number>(batchShape.length - tBatch.length).fill(1), ...tBatch];
      const padView = reshape(t, [...padded, ...mat]);
      owned.push(padView);
      source = expand(padView, [...batchShape, ...mat]);
      owned.push(source);
    }
    const flat = shapeSize(tBatch) === 1 ? 1 : batch;
    const r = reshape(source, [flat, mat[0]!, mat[1]!]);
    owned.push(r);
    return r;
  };
  try {
    const a3 = to3d(a, aBatch, aMat);
    const b3 = to3d(b, bBatch, bMat);
    const out3 = batchedMatmul(a3, b3, { transposeA, transposeB });
    owned.push(out3);
    const m = transposeA ? aMat[1]! : aMat[0]!;
    const n = transposeB ? bMat[0]! : bMat[1]!;
    const outShape = [...batchShape];
    if (a.rank > 1) outShape.push(m);
    if (b.rank > 1) outShape.push(n);
    return reshape(out3, outShape);
  } finally {
    for (const t of owned) t.free();
  }
}

/**
 * x W^T + b for a weight [out, in] (`F.linear`): a composite of `matmul` with `transposeB` and
 * `add`, or one `linear` kernel with the same bits where the backend has it ([Note: the bias in
 * the gemm]). Its own row of the autocast policy, as PyTorch's `linear`: inside `autocast`, x, the
 * weight and the bias are all cast to the lower-precision dtype, so the output is too.
 */
export function linear(x: Tensor, weight: Tensor, bias: Tensor | null = null): Tensor {
  return autocastOp('linear', [x, weight, bias], ([cx, cw, cb]) => {
    const fused = cb === null ? null : linearInOneKernel(cx!, cw!, cb);
    if (fused !== null) return fused;
    const y = matmul(cx, cw, { transposeB: true });
    if (cb === null) return y;
    try {
      return add(y, cb);
    } finally {
      y.free();
    }
  });
}

/**
 * x W^T + b by the backend's `linear` kernel where it has one and takes the call ([Note: the bias
 * in the gemm] in backend/cpu/matmul.ts), recorded as the `linear` primitive; null where the
 * matmul and the add run instead (they also raise the errors of operands that do not fit).
 */
function linearInOneKernel(x: Tensor, weight: Tensor, bias: Tensor): Tensor | null {
  const backend = backendOf('linear', [x, weight, bias]);
  if (backend.linear === undefined || weight.rank !== 2 || bias.rank !== 1 || x.rank === 0) {
    return null;
  }
  const [n, k] = weight.shape as [number, number];
  if (x.shape[x.rank - 1] !== k || bias.shape[0] !== n) return null;
  if (x.dtype !== weight.dtype || bias.dtype !== weight.dtype) return null;
  const out = Tensor.empty(backend, [...x.shape.slice(0, -1), n], x.dtype);
  const done =
    out.size > 0 &&
    backend.linear(
      x.kernel('linear'),
      weight.kernel('linear'),
      bias.kernel('linear'),
      out.kernel('linear'),
    );
  if (!done) {
    out.free();
    return null;
  }
  // addmm's order (PyTorch's `linear`): the bias's gradient is ready first, then the weight's, as
  // after the add and the matmul this replaces (DDP's buckets fill in that order).
  recordOp('linear', [bias, x, weight], out);
  return out;
}
