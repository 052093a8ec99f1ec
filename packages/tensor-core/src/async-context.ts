/**
 * [Note: async context]
 * Some state must follow one asynchronous call chain rather than the whole thread: the backward
 * pass that ambient code belongs to (`queueCallback()`), grad mode inside an async `noGrad`, the
 * scope of an async `tidy`. Several ranks of a job may run in one thread (the `local` transport) and interleave
 * at every `await`, so a global variable would let one rank's state leak into another's: rank 1's
 * end-of-backward callback ran at the end of rank 0's backward, and rank 1's ops went unrecorded
 * while rank 0 was inside an async `noGrad`.
 *
 * In Node, a `ContextSlot` is an `AsyncLocalStorage`, which follows `await`, promise callbacks and
 * timers; it is reached through `process.getBuiltinModule` (Node >= 20.16), so no `node:` import
 * sits in this entry's static graph and the package still loads in browsers. Where there is no
 * `AsyncLocalStorage` (browsers today) the slot holds the value of the latest `run` not yet
 * settled: correct for one chain at a time, which is the case of a page running one rank. Runs of
 * several chains that overlap see each other's values while they overlap, and each one's end takes
 * only its own value away, so the slot is back to its initial value once all have settled (a
 * restore of the value seen at the start would leave the first-started run's value behind when
 * runs end out of order). The backward that hooks and callbacks belong to does not depend on this:
 * the engine hands it to them ([Note: the running backward]); grad mode and `tidyAsync` do, so two
 * ranks in one page must not overlap an async `noGrad` (a checkpoint of an async module) or an
 * async `tidy`.
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
  /** Without AsyncLocalStorage: the runs not yet settled, latest last. */
  private readonly active: { value: T }[] = [];

  constructor(private readonly initial: T) {
    this.storage = Als === null ? null : new Als<{ value: T }>();
  }

  /** The value in this chain (the initial value outside any `run`). */
  get(): T {
    if (this.storage === null) {
      const n = this.active.length;
      return n === 0 ? this.initial : this.active[n - 1]!.value;
    }
    const store = this.storage.getStore();
    return store === undefined ? this.initial : store.value;
  }

  /**
   * Run `fn` with the value set to `value` for `fn` and everything it awaits. Without
   * `AsyncLocalStorage`, from the start of `fn` to the settling of its promise, for the thread.
   */
  run<R>(value: T, fn: () => R): R {
    if (this.storage !== null) return this.storage.run({ value }, fn);
    const entry = { value };
    this.active.push(entry);
    let result: R;
    try {
      result = fn();
    } catch (error) {
      this.leave(entry);
      throw error;
    }
    if (result instanceof Promise) {
      return result.finally(() => {
        this.leave(entry);
      }) as R;
    }
    this.leave(entry);
    return result;
  }

  private leave(entry: { value: T }): void {
    const i = this.active.lastIndexOf(entry);
    if (i === this.active.length - 1) this.active.pop();
    else if (i >= 0) this.active.splice(i, 1);
  }
}
