import { GradNode } from '../autograd/node.js';
import { isGradEnabled } from '../autograd/grad-mode.js';
import {
  type AutocastDeviceType,
  type AutocastScope,
  activeAutocastScope,
  withAutocastExcluded,
} from '../autocast-state.js';
import type { DType } from '../dtype.js';
import { keep } from '../scope.js';
import type { Tensor } from '../tensor.js';
import { cast } from './cast.js';

/**
 * How an op's floating inputs are cast inside an autocast scope: `lowerPrecision` to the scope's
 * dtype, `f32` to f32, `promote` to the widest of them (f32 unless all share one dtype),
 * `firstInput` to the first input's dtype.
 */
export type AutocastPolicy = 'lowerPrecision' | 'f32' | 'promote' | 'firstInput';

/**
 * [Note: the autocast op policy]
 * PyTorch's autocast (`aten/src/ATen/autocast_mode.{h,cpp}`) sorts ops into lists, per device
 * type: the lower-precision list (matmuls, linear, convolutions: inputs cast to f16/bf16), the
 * f32 list (pointwise ops that lose range in 16 bits, norms, losses; softmax, log-softmax and sum
 * through `fp32_set_opt_dtype`, which makes their output f32), and the promote list (ops of
 * several inputs that run in the widest). Every other op runs in its inputs' dtype, with type
 * promotion when they differ. This table is those lists' rows for webshard's ops, in two columns:
 * `cuda`, the lists PyTorch shares between CUDA, XPU and other devices (`AT_FORALL_LOWER_PRECISION_FP`,
 * `AT_FORALL_FP32`, `AT_FORALL_FP32_SET_OPT_DTYPE`, `AT_FORALL_PROMOTE`), the policy fairscale's
 * FSDP runs under and `autocast`'s default; and `cpu`, `torch.autocast('cpu')`'s shorter lists
 * (softmax, layer_norm, sum, exp and log are not in them: they stay in bf16 there), for a run
 * that must match PyTorch on a CPU. Either column runs on every backend, so a model computes the
 * same dtypes, and the same bits, on the CPU and on WebGPU.
 *
 * webshard's ops need one dtype for all their operands where PyTorch would promote, so the ops of
 * two or three float tensors (add, sub, mul, div, pow, maximum, minimum, where, concat, indexAdd)
 * are `promote` where PyTorch lists nothing: inside a scope, `y_bf16 + x_f32` is f32, as in
 * PyTorch. Outside a scope they still throw `DTypeError` on mixed dtypes. PyTorch's CPU
 * `layer_norm` takes a bf16 input with f32 weights and gives bf16, so there it is `firstInput`.
 * `mean` is in neither list and runs its sum in its input's dtype.
 *
 * Only eligible tensors are cast: floating (f32, f16, bf16), never f64 or i32. An op applies the
 * policy once at its entry; its composites run with the policy excluded ([Note: autocast scope
 * state]). Casts are recorded by autograd, so gradients flow back through them into each input's
 * dtype: an f32 leaf gets an f32 gradient. A cast made for one op is freed after it (autograd
 * keeps what it saved), except the cached casts of leaves ([Note: the autocast cast cache]).
 */
export const AUTOCAST_POLICY: Readonly<
  Record<string, Readonly<Partial<Record<AutocastDeviceType, AutocastPolicy>>>>
> = {
  matmul: { cuda: 'lowerPrecision', cpu: 'lowerPrecision' },
  linear: { cuda: 'lowerPrecision', cpu: 'lowerPrecision' },
  exp: { cuda: 'f32' },
  log: { cuda: 'f32' },
  reciprocal: { cuda: 'f32' },
  rsqrt: { cuda: 'f32' },
  pow: { cuda: 'f32', cpu: 'promote' },
  softmax: { cuda: 'f32' },
  logSoftmax: { cuda: 'f32' },
  layerNorm: { cuda: 'f32', cpu: 'firstInput' },
  sum: { cuda: 'f32' },
  mseLoss: { cuda: 'f32', cpu: 'f32' },
  crossEntropy: { cuda: 'f32', cpu: 'f32' },
  add: { cuda: 'promote', cpu: 'promote' },
  sub: { cuda: 'promote', cpu: 'promote' },
  mul: { cuda: 'promote', cpu: 'promote' },
  div: { cuda: 'promote', cpu: 'promote' },
  maximum: { cuda: 'promote', cpu: 'promote' },
  minimum: { cuda: 'promote', cpu: 'promote' },
  where: { cuda: 'promote', cpu: 'promote' },
  concat: { cuda: 'promote', cpu: 'promote' },
  indexAdd: { cuda: 'promote', cpu: 'promote' },
};

function eligible(t: Tensor | null): t is Tensor {
  return t !== null && (t.dtype === 'f32' || t.dtype === 'f16' || t.dtype === 'bf16');
}

/**
 * [Note: the autocast cast cache]
 * As PyTorch (which does what Apex did), the lower-precision cast of an f32 leaf that requires grad
 * (a weight) is made once and reused by every op of the chain's outermost scope and the scopes
 * nested in it; leaving the outermost scope frees them, and so does `clearAutocastCache()`. The
 * cache is keyed by the tensor object, as PyTorch keys it by TensorImpl: a weight written in place,
 * or given new storage (`param.data = full`, FSDP's gather), inside one scope still finds its old
 * cast. That is why fairscale's FSDP clears the cache after each forward (`clearAutocastCache`
 * there). Casts made with grad mode off are not cached (a cached cast without a graph would give
 * a later op with grad mode on no gradient), and a cast whose backward already ran is made again,
 * since its node was released (webshard frees nodes after backward unless `retainGraph`).
 */
function cachedCast(
  scope: AutocastScope,
  x: Tensor,
  dtype: DType,
): { out: Tensor; owned: boolean } {
  const cacheable =
    scope.cacheEnabled &&
    dtype === scope.dtype &&
    x.dtype === 'f32' &&
    x.requiresGrad &&
    x.isLeaf &&
    isGradEnabled();
  if (!cacheable) return { out: cast(x, dtype), owned: true };
  const hit = scope.cache.get<Tensor>(x);
  if (hit !== undefined && !hit.isFreed) {
    const released = hit.gradFn instanceof GradNode && hit.gradFn.state === 'released';
    if (!released) return { out: hit, owned: false };
  }
  const out = keep(cast(x, dtype));
  scope.cache.set(x, out);
  return { out, owned: false };
}

/** The dtype `policy` casts `inputs` to in `scope`, or null to leave them. */
function targetDType(
  policy: AutocastPolicy,
  scope: AutocastScope,
  inputs: readonly Tensor[],
): DType | null {
  if (policy === 'lowerPrecision') return scope.dtype;
  if (policy === 'f32') return 'f32';
  if (policy === 'firstInput') return inputs[0]?.dtype ?? null;
  const dtypes = new Set(inputs.map((t) => t.dtype));
  return dtypes.size > 1 ? 'f32' : null;
}

/**
 * Run op `name` on `inputs` cast by its autocast policy (unchanged outside a scope, or when the op
 * is not in the table): `body` gets the inputs in the same order (null and ineligible ones as they
 * were) and runs with the policy excluded. Casts that are not cached are freed after `body`.
 */
export function autocastOp<const I extends readonly (Tensor | null)[], R>(
  name: string,
  inputs: I,
  body: (inputs: I) => R,
): R {
  const scope = activeAutocastScope();
  if (scope === null) return body(inputs);
  const policy = AUTOCAST_POLICY[name]?.[scope.deviceType];
  if (policy === undefined) return body(inputs);
  const floats = inputs.filter(eligible);
  const dtype = targetDType(policy, scope, floats);
  const owned: Tensor[] = [];
  let castInputs: I = inputs;
  if (dtype !== null && floats.some((t) => t.dtype !== dtype)) {
    castInputs = inputs.map((t) => {
      if (!eligible(t) || t.dtype === dtype) return t;
      const made = cachedCast(scope, t, dtype);
      if (made.owned) owned.push(made.out);
      return made.out;
    }) as unknown as I;
  }
  try {
    return withAutocastExcluded(() => body(castInputs));
  } finally {
    for (const t of owned) t.free();
  }
}
