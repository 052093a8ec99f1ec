import { ContextSlot } from './async-context.js';

/** The dtypes an autocast scope computes its lower-precision ops in. */
export type AutocastDType = 'f16' | 'bf16';

/**
 * Whose op lists a scope follows: PyTorch's `torch.autocast(device_type)` lists for CUDA (shared
 * with XPU and other devices) or for the CPU ([Note: the autocast op policy]).
 */
export type AutocastDeviceType = 'cuda' | 'cpu';

/** What the cache holds: tensors, seen from below the tensor (this file imports no tensor). */
interface Freeable {
  free(): void;
}

/**
 * The casts of f32 leaves made in one chain's outermost autocast scope, shared by the scopes
 * nested in it ([Note: the autocast cast cache]). Keyed by the leaf tensor object; the ops put
 * tensors in and take tensors out.
 */
export class AutocastCache {
  private readonly casts = new Map<object, Freeable>();

  /** The cached cast of `leaf`, if any. */
  get<T extends Freeable>(leaf: object): T | undefined {
    return this.casts.get(leaf) as T | undefined;
  }

  /** Hold `cast` as `leaf`'s cast, freeing the one it replaces. */
  set(leaf: object, cast: Freeable): void {
    const previous = this.casts.get(leaf);
    if (previous !== undefined && previous !== cast) previous.free();
    this.casts.set(leaf, cast);
  }

  /** How many casts are held. */
  get size(): number {
    return this.casts.size;
  }

  /** Free every cast and forget them (autograd keeps what it saved of them). */
  clear(): void {
    for (const cast of this.casts.values()) cast.free();
    this.casts.clear();
  }
}

/** One autocast scope as the ops see it. */
export interface AutocastScope {
  /** Whether ops cast by the policy in this scope (`enabled: false` turns a nested scope off). */
  readonly enabled: boolean;
  /** The lower-precision dtype. */
  readonly dtype: AutocastDType;
  /** Whose op lists the policy follows. */
  readonly deviceType: AutocastDeviceType;
  /** Whether f32 leaves' lower-precision casts are cached. */
  readonly cacheEnabled: boolean;
  /** The chain's cache, made by its outermost scope. */
  readonly cache: AutocastCache;
}

/**
 * [Note: autocast scope state]
 * The scope follows the async call chain ([Note: async context]), as grad mode does: ranks that
 * share a thread (the `local` transport) each have their own scope and their own cache, and an
 * async forward under `autocast` (an FSDP unit awaiting its all-gather) stays in its scope across
 * the awaits. Without `AsyncLocalStorage` (browsers) a scope is set from `fn`'s start until its
 * promise settles, as grad mode is there: right for one chain at a time (a page running one rank);
 * two ranks of one page under `autocast` at once would see each other's scope. This file holds the
 * state only, apart from autograd's context (whose running-backward part may move off
 * `AsyncLocalStorage` on its own): `amp/autocast.ts` opens and closes scopes,
 * `ops/autocast-policy.ts` reads them.
 *
 * Inside an op that applied the policy, the op's own composites (matmul's reshapes and batched
 * product, mean's sum, a loss's reductions) run with the policy excluded, as PyTorch's autocast
 * wrappers exclude the autocast dispatch key while they redispatch. Ops are synchronous, so the
 * exclusion is a plain counter.
 */
const scopeSlot = new ContextSlot<AutocastScope | null>(null);
let excluded = 0;

/** The chain's innermost autocast scope, or null outside any. */
export function currentAutocastScope(): AutocastScope | null {
  return scopeSlot.get();
}

/** The scope whose policy ops apply now: null outside a scope, in a disabled one, or excluded. */
export function activeAutocastScope(): AutocastScope | null {
  if (excluded > 0) return null;
  const scope = scopeSlot.get();
  return scope?.enabled ? scope : null;
}

/** What a scope is opened with: `AutocastScope` less its cache. */
export type AutocastSettings = Omit<AutocastScope, 'cache'>;

/** The settings of the chain's scope (for a checkpoint to recompute in), or null outside any. */
export function currentAutocastSettings(): AutocastSettings | null {
  const scope = scopeSlot.get();
  if (scope === null) return null;
  const { enabled, dtype, deviceType, cacheEnabled } = scope;
  return { enabled, dtype, deviceType, cacheEnabled };
}

/**
 * Run `fn` (and what it awaits) in a new scope with `settings`. It shares the cache of the scope it
 * is nested in; the outermost scope of a chain makes the cache and frees it when `fn` returns,
 * throws, or its promise settles.
 */
export function runInAutocastScope<R>(settings: AutocastSettings, fn: () => R): R {
  const parent = scopeSlot.get();
  const cache = parent?.cache ?? new AutocastCache();
  const scope: AutocastScope = { ...settings, cache };
  if (parent !== null) return scopeSlot.run(scope, fn);
  let result: R;
  try {
    result = scopeSlot.run(scope, fn);
  } catch (error) {
    cache.clear();
    throw error;
  }
  if (result instanceof Promise) {
    return result.finally(() => cache.clear()) as R;
  }
  cache.clear();
  return result;
}

/** Run the synchronous `fn` with the autocast policy excluded (an op's own composites). */
export function withAutocastExcluded<R>(fn: () => R): R {
  excluded++;
  try {
    return fn();
  } finally {
    excluded--;
  }
}
