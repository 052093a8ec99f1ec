import {
  type AutocastDeviceType,
  type AutocastDType,
  currentAutocastScope,
  runInAutocastScope,
} from '../autocast-state.js';
import { ArgumentError } from '../errors.js';

/** Options of `autocast`; defaults are PyTorch's where it has one. */
export interface AutocastOptions {
  /**
   * The lower-precision dtype of the scope's matmuls and linear layers. Default: the enclosing
   * scope's, else PyTorch's for `deviceType` (`'f16'` for `'cuda'`, `'bf16'` for `'cpu'`).
   */
  dtype?: AutocastDType;
  /**
   * Whose op lists to follow ([Note: the autocast op policy]): PyTorch's for `'cuda'` (shared with
   * XPU and other devices; the default) or for `'cpu'`, to match a `torch.autocast('cpu')` run.
   * Not where the ops run: either runs on every backend. Default: the enclosing scope's.
   */
  deviceType?: AutocastDeviceType;
  /** `false` runs `fn` with autocast off, inside an enabled scope too. Default true. */
  enabled?: boolean;
  /** Cache the casts of f32 leaves that require grad (weights) for the scope. Default true. */
  cacheEnabled?: boolean;
}

/**
 * Run `fn` with autocast: inside it (and in what it awaits, in this call chain only), the ops of
 * [Note: the autocast op policy] cast their floating inputs, matmuls and linear layers to `dtype`,
 * reductions, softmax, norms and losses to f32, elementwise ops of mixed dtypes to the widest;
 * `torch.autocast(device_type, dtype)` as a function of a callback. Returns what `fn` returns (a
 * promise when `fn` is async). Scopes nest; each restores the one around it when `fn` returns or
 * throws, and the chain's outermost one frees the weight casts it cached ([Note: the autocast cast
 * cache]).
 *
 * ```ts
 * const loss = await autocast({ dtype: 'bf16' }, async () => crossEntropy(await model.call(x), y));
 * await scaler.scale(loss).backward(); // outside the scope, as PyTorch recommends
 * ```
 *
 * Gradients flow back through the casts, so f32 parameters get f32 gradients; with f16, scale the
 * loss with a `GradScaler`.
 */
export function autocast<R>(options: AutocastOptions, fn: () => R): R {
  const enclosing = currentAutocastScope();
  const deviceType = options.deviceType ?? enclosing?.deviceType ?? 'cuda';
  if (deviceType !== 'cuda' && deviceType !== 'cpu') {
    throw new ArgumentError(
      'autocast',
      `deviceType must be 'cuda' or 'cpu', got '${String(deviceType)}'`,
    );
  }
  const dtype = options.dtype ?? enclosing?.dtype ?? (deviceType === 'cpu' ? 'bf16' : 'f16');
  if (dtype !== 'f16' && dtype !== 'bf16') {
    throw new ArgumentError('autocast', `dtype must be 'f16' or 'bf16', got '${String(dtype)}'`);
  }
  return runInAutocastScope(
    {
      enabled: options.enabled ?? true,
      dtype,
      deviceType,
      cacheEnabled: options.cacheEnabled ?? true,
    },
    fn,
  );
}

/** Whether ops in this call chain run under an enabled autocast scope. */
export function isAutocastEnabled(): boolean {
  return currentAutocastScope()?.enabled ?? false;
}

/**
 * Free the casts of weights cached by this chain's autocast scopes (`torch.clear_autocast_cache`):
 * the next op casts them again, from their current values. A no-op outside a scope.
 */
export function clearAutocastCache(): void {
  currentAutocastScope()?.cache.clear();
}
