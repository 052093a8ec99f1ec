import type { KernelTensor } from '../backend/backend.js';
import { ArgumentError, BackendError } from '../errors.js';
import { Tensor } from '../tensor.js';
import { hostStep } from '../capture/host-step.js';

/** Options of `clipGradNorm`. */
export interface ClipGradNormOptions {
  /** The p of the p-norm; `Infinity` for the max norm. Default 2. */
  normType?: number;
  /**
   * Combine the local partial norm across ranks (a sharded wrapper all-reduces it): receives the
   * local sum of |g|^p (for `normType` Infinity: the local max |g|) and resolves to the global one.
   * Called on every rank, even one that holds no gradients (with 0), so collectives stay matched.
   */
  reduceNorm?: (localPartial: number) => Promise<number>;
  /** Throw if the total norm is NaN or infinite instead of scaling by it. Default false. */
  errorIfNonfinite?: boolean;
  /**
   * Called with the total norm each time the clip runs, each replay of a captured step included
   * (whose caller gets no return value from it: [Note: host steps in a captured step]).
   */
  onTotal?: (total: number) => void;
}

/**
 * Partial p-norm of several tensors, on their backend: sum over tensors of sum |x|^p, or the max |x|
 * for p = Infinity. One read back to the host.
 */
export async function partialNorm(tensors: readonly Tensor[], normType: number): Promise<number> {
  const total = partialNormTensor(tensors, normType);
  if (total === null) return 0;
  try {
    return await total.item();
  } finally {
    total.free();
  }
}

/** `partialNorm` left on the device: a 0-d tensor the caller frees; null for no tensors. */
function partialNormTensor(tensors: readonly Tensor[], normType: number): Tensor | null {
  if (tensors.length === 0) return null;
  const backend = tensors[0]!.backend;
  const dtype = tensors.some((t) => t.dtype === 'f64') ? 'f64' : 'f32';
  const partials = Tensor.empty(backend, [tensors.length], dtype);
  const temps: Tensor[] = [partials];
  try {
    tensors.forEach((t, i) => {
      if (t.backend !== backend) {
        throw new BackendError(
          'clipGradNorm',
          `gradients on two backends (${backend.kind} and ${t.backend.kind})`,
        );
      }
      // Kernel outputs never alias their inputs (WebGPU forbids it), so each stage gets a buffer.
      const stage = (): KernelTensor => {
        const x = Tensor.empty(backend, [t.size], dtype);
        temps.push(x);
        return x.kernel('clipGradNorm');
      };
      // A gradient already in the sum's dtype is read where it is: a cast to the same dtype would
      // copy every gradient once more (GPT-2: 497 MB a step, and a fresh 154 MB buffer for wte's).
      const flat: KernelTensor = { ...t.kernel('clipGradNorm'), shape: [t.size] };
      let x = flat;
      if (t.dtype !== dtype) {
        x = stage();
        backend.cast(flat, x);
      }
      const slot: KernelTensor = { ...partials.kernel('clipGradNorm'), offset: i, shape: [] };
      const next = stage();
      backend.unary(normType === 2 ? 'square' : 'abs', x, next);
      x = next;
      if (normType !== 2 && normType !== Number.POSITIVE_INFINITY) {
        const powered = stage();
        backend.binary('pow', x, normType, powered);
        x = powered;
      }
      backend.reduce(normType === Number.POSITIVE_INFINITY ? 'max' : 'sum', x, 0, slot);
      // Work is queued in order, so the pool may hand these to the next gradient's stages.
      while (temps.length > 1) temps.pop()!.free();
    });
    const total = Tensor.empty(backend, [], dtype);
    backend.reduce(
      normType === Number.POSITIVE_INFINITY ? 'max' : 'sum',
      partials.kernel('clipGradNorm'),
      0,
      total.kernel('clipGradNorm'),
    );
    return total;
  } finally {
    for (const t of temps) t.free();
  }
}

/**
 * Clip the gradients of `params` in place so that their joint p-norm is at most `maxNorm`, like
 * `torch.nn.utils.clip_grad_norm_`: total = (sum |g|^p)^(1/p) over every gradient,
 * clip_coef = maxNorm / (total + 1e-6), and when clip_coef < 1 each gradient is multiplied by it.
 * Returns the total norm (before clipping). With `reduceNorm`, the norm is global across ranks.
 *
 * [Note: clipping sharded gradients]
 * A rank of a sharded wrapper holds only its shard of each gradient, so its norm is partial. The
 * partial sum of |g|^p (not the norm) is what adds up across ranks, so that is what `reduceNorm`
 * receives; for the max norm it receives the local max and must return the global max.
 */
export async function clipGradNorm(
  params: Iterable<Tensor>,
  maxNorm: number,
  options: ClipGradNormOptions = {},
): Promise<number> {
  const normType = options.normType ?? 2;
  if (!(normType > 0)) {
    throw new ArgumentError('clipGradNorm', `normType ${normType} must be positive`);
  }
  if (!(maxNorm >= 0)) throw new ArgumentError('clipGradNorm', `maxNorm ${maxNorm} is invalid`);
  const grads: Tensor[] = [];
  for (const p of params) if (p.grad !== null) grads.push(p.grad);
  const partialTensor = partialNormTensor(grads, normType);
  // What follows decides on the host from the norm read back: a host step, so a captured step's
  // replay reads and decides again ([Note: host steps in a captured step]). It reaches the norm and
  // the gradients through their operands, as the replay's gradients are no tensors of their own.
  const norm = partialTensor?.kernel('clipGradNorm') ?? null;
  const operands = grads.map((g) => ({ backend: g.backend, grad: g.kernel('clipGradNorm') }));
  try {
    return await hostStep(async () => {
      let partial = norm === null ? 0 : (await partialTensor!.backend.read(norm))[0]!;
      if (options.reduceNorm) partial = await options.reduceNorm(partial);
      const inf = normType === Number.POSITIVE_INFINITY;
      const total = inf ? partial : partial ** (1 / normType);
      if (options.errorIfNonfinite && !Number.isFinite(total)) {
        throw new ArgumentError(
          'clipGradNorm',
          `the total norm of order ${normType} is ${total}: gradients are not finite`,
        );
      }
      const coef = Math.fround(maxNorm / (Math.fround(total) + 1e-6));
      if (!(coef >= 1)) {
        // In place (`g.mul_(clip_coef)`): a copy of every gradient and back cost GPT-2's step
        // some 0.3-0.4 s, most of it for the token embedding's 154 MB (issue 49).
        for (const { backend, grad } of operands) backend.binary('mul', grad, coef, grad);
      }
      options.onTotal?.(total);
      return total;
    });
  } finally {
    partialTensor?.free();
  }
}
