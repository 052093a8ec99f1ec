import { ContextSlot } from './async-context.js';
import type { Tensor } from './tensor.js';

/**
 * [Note: tensor lifetimes]
 * JavaScript has no deterministic destructors, so device memory is released explicitly: by
 * `tensor.free()`, or by `tidy(fn)`, which frees every tensor created inside `fn` except those it
 * returns and those passed to `keep`. Autograd holds its own references to the storage it saved
 * for backward, so tensors freed by a scope stay alive for backward exactly as long as needed.
 * `tidy` is synchronous; `tidyAsync` is its async form, whose scope follows the async call chain
 * ([Note: async context]), so tensors made after an `await` (a wrapper's all-gather in between)
 * still belong to it while other chains in the thread make their own. A tensor joins the innermost
 * synchronous `tidy` running, else the chain's innermost `tidyAsync`.
 */
const scopes: Set<Tensor>[] = [];

/** An async scope and the one it is nested in. */
interface AsyncScope {
  readonly tensors: Set<Tensor>;
  readonly parent: AsyncScope | null;
}

const asyncScope = new ContextSlot<AsyncScope | null>(null);

/** Marks tensor objects, so a scope's result is searched without walking into a tensor's backend. */
export const tensorMarker = Symbol.for('webshard.tensor');

export function registerInScope(tensor: Tensor): void {
  const sync = scopes[scopes.length - 1];
  if (sync !== undefined) sync.add(tensor);
  else asyncScope.get()?.tensors.add(tensor);
}

/** Keep `tensor` alive past the enclosing `tidy` and `tidyAsync` scopes. */
export function keep<T extends Tensor>(tensor: T): T {
  for (const scope of scopes) scope.delete(tensor);
  for (let s = asyncScope.get(); s !== null; s = s.parent) s.tensors.delete(tensor);
  return tensor;
}

type Kept =
  | Tensor
  | readonly Kept[]
  | { readonly [key: string]: Kept }
  // biome-ignore lint/suspicious/noConfusingVoidType: tidy(() => { ... }) returns void
  | void
  | number
  | string
  | boolean
  | null
  | undefined;

function collect(value: unknown, into: Set<Tensor>, seen = new Set<unknown>()): void {
  if (value === null || typeof value !== 'object' || seen.has(value)) return;
  seen.add(value);
  if (tensorMarker in (value as object)) {
    into.add(value as Tensor);
    return;
  }
  if (Array.isArray(value)) {
    for (const v of value) collect(v, into, seen);
    return;
  }
  for (const v of Object.values(value as Record<string, unknown>)) collect(v, into, seen);
}

/** Run `fn`; free the tensors it created except those reachable from its result or kept. */
export function tidy<T extends Kept>(fn: () => T): T {
  const scope = new Set<Tensor>();
  scopes.push(scope);
  let result: T;
  try {
    result = fn();
  } finally {
    scopes.pop();
  }
  const survivors = new Set<Tensor>();
  collect(result, survivors);
  for (const tensor of scope) {
    if (survivors.has(tensor)) registerInScope(tensor);
    else tensor.free();
  }
  return result;
}

/**
 * `tidy` for an async `fn`: frees the tensors created in `fn`'s call chain (across its awaits)
 * except those reachable from its result or kept. Tensors created by other call chains meanwhile
 * (other ranks in the thread) are not this scope's.
 */
export async function tidyAsync<T extends Kept>(fn: () => Promise<T>): Promise<T> {
  const parent = asyncScope.get();
  const scope: AsyncScope = { tensors: new Set(), parent };
  let result: T;
  try {
    result = await asyncScope.run(scope, fn);
  } catch (error) {
    for (const tensor of scope.tensors) tensor.free();
    throw error;
  }
  const survivors = new Set<Tensor>();
  collect(result, survivors);
  for (const tensor of scope.tensors) {
    if (survivors.has(tensor)) parent?.tensors.add(tensor);
    else tensor.free();
  }
  return result;
}
