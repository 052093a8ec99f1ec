import { ContextSlot } from '../async-context.js';

/**
 * [Note: grad mode]
 * Whether ops record autograd nodes. `noGrad(fn)` and `enableGrad(fn)` set it for `fn` and,
 * when `fn` is async, for everything it awaits, in that call chain only ([Note: async context]):
 * an async forward under `noGrad` (a checkpointed region awaiting an all-gather) does not turn
 * recording off for another rank running in the same thread. `setGradEnabled` sets it for the
 * synchronous code that follows, until set back (the engine uses it around a formula or a hook's
 * synchronous part); inside `noGrad` / `enableGrad` their value applies again.
 */
const mode = new ContextSlot<boolean>(true);
/** Set by `setGradEnabled` for a synchronous section; `undefined` defers to the chain's mode. */
let override: boolean | undefined;

/** Whether ops currently record autograd nodes. */
export function isGradEnabled(): boolean {
  return override ?? mode.get();
}

/**
 * Set grad mode for the synchronous code that follows (until set back); returns the previous
 * value. Prefer `noGrad` / `enableGrad`, which also cover what an async function awaits.
 */
export function setGradEnabled(enabled: boolean): boolean {
  const previous = isGradEnabled();
  override = enabled === mode.get() ? undefined : enabled;
  return previous;
}

function withGradMode<T>(enabled: boolean, fn: () => T): T {
  const saved = override;
  override = undefined;
  try {
    return mode.run(enabled, fn);
  } finally {
    override = saved;
  }
}

/** Run `fn` without recording autograd nodes (PyTorch's `torch.no_grad()`). */
export function noGrad<T>(fn: () => T): T {
  return withGradMode(false, fn);
}

/** Run `fn` recording autograd nodes, even inside `noGrad` (PyTorch's `torch.enable_grad()`). */
export function enableGrad<T>(fn: () => T): T {
  return withGradMode(true, fn);
}
