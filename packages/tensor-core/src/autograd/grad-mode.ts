/**
 * [Note: grad mode]
 * Whether ops record autograd nodes is one global flag (JavaScript runs one task at a time, so
 * there is no per-thread mode as in PyTorch). `noGrad(fn)` and `enableGrad(fn)` set it for the
 * duration of `fn` and restore the previous value afterwards; when `fn` returns a promise the value
 * is restored once the promise settles, so an async forward (FSDP awaiting an all-gather) stays
 * under the mode it was started in. Code interleaved with such a promise sees the same mode: do not
 * run training and evaluation concurrently.
 */
let gradEnabled = true;

/** Whether ops currently record autograd nodes. */
export function isGradEnabled(): boolean {
  return gradEnabled;
}

/** Set grad mode; returns the previous value. Prefer `noGrad` / `enableGrad`. */
export function setGradEnabled(enabled: boolean): boolean {
  const previous = gradEnabled;
  gradEnabled = enabled;
  return previous;
}

function withGradMode<T>(enabled: boolean, fn: () => T): T {
  const previous = setGradEnabled(enabled);
  let result: T;
  try {
    result = fn();
  } catch (error) {
    gradEnabled = previous;
    throw error;
  }
  if (result instanceof Promise) {
    return result.finally(() => {
      gradEnabled = previous;
    }) as T;
  }
  gradEnabled = previous;
  return result;
}

/** Run `fn` without recording autograd nodes (PyTorch's `torch.no_grad()`). */
export function noGrad<T>(fn: () => T): T {
  return withGradMode(false, fn);
}

/** Run `fn` recording autograd nodes, even inside `noGrad` (PyTorch's `torch.enable_grad()`). */
export function enableGrad<T>(fn: () => T): T {
  return withGradMode(true, fn);
}
