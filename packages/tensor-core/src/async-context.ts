/**
 * [Note: async context]
 * Some state must follow one asynchronous call chain rather than the whole thread: the backward
 * pass a hook belongs to (`queueCallback`), grad mode inside an async `noGrad`, the scope of an
 * async `tidy`. Several ranks of a job may run in one thread (the `local` transport) and interleave
 * at every `await`, so a global variable would let one rank's state leak into another's: rank 1's
 * end-of-backward callback ran at the end of rank 0's backward, and rank 1's ops went unrecorded
 * while rank 0 was inside an async `noGrad`.
 *
 * In Node, a `ContextSlot` is an `AsyncLocalStorage`, which follows `await`, promise callbacks and
 * timers; it is reached through `process.getBuiltinModule` (Node >= 20.16), so no `node:` import
 * sits in this entry's static graph and the package still loads in browsers. Where there is no
 * `AsyncLocalStorage` (browsers today) the slot is a plain variable set for the synchronous part
 * of `run`: correct for one chain at a time, which is the case of a page running one rank.
 */

interface AsyncLocalStorageLike<T> {
  getStore(): T | undefined;
  run<R>(store: T, fn: () => R): R;
}

type AlsConstructor = new <T>() => AsyncLocalStorageLike<T>;

function findAsyncLocalStorage(): AlsConstructor | null {
  const proc = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  const hooks = proc?.getBuiltinModule?.('node:async_hooks') as
    | { AsyncLocalStorage?: AlsConstructor }
    | undefined;
  return hooks?.AsyncLocalStorage ?? null;
}

const Als = findAsyncLocalStorage();

/** Whether context slots follow async call chains here (Node) or only synchronous code. */
export const asyncContextSupported = Als !== null;

/** A value scoped to the current async call chain (see [Note: async context]). */
export class ContextSlot<T> {
  private readonly storage: AsyncLocalStorageLike<{ value: T }> | null;
  private fallback: T;

  constructor(private readonly initial: T) {
    this.storage = Als === null ? null : new Als<{ value: T }>();
    this.fallback = initial;
  }

  /** The value in this chain (the initial value outside any `run`). */
  get(): T {
    if (this.storage === null) return this.fallback;
    const store = this.storage.getStore();
    return store === undefined ? this.initial : store.value;
  }

  /**
   * Run `fn` with the value set to `value` for `fn` and everything it awaits. Without
   * `AsyncLocalStorage`, only for `fn`'s synchronous part and the settling of its promise.
   */
  run<R>(value: T, fn: () => R): R {
    if (this.storage !== null) return this.storage.run({ value }, fn);
    const previous = this.fallback;
    this.fallback = value;
    let result: R;
    try {
      result = fn();
    } catch (error) {
      this.fallback = previous;
      throw error;
    }
    if (result instanceof Promise) {
      return result.finally(() => {
        this.fallback = previous;
      }) as R;
    }
    this.fallback = previous;
    return result;
  }
}
