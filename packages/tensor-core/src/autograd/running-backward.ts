import { asyncContextSupported, ContextSlot } from '../async-context.js';
import { ArgumentError } from '../errors.js';
import { AutogradError } from './errors.js';

/**
 * [Note: the running backward]
 * Hooks and nodes need the backward pass that runs them: FSDP's pre-backward hook queues its
 * end-of-backward callback on it, DDP's first gradient queues its flush, a checkpoint's
 * recomputation nests its backward in it. The engine hands it to them: every tensor hook,
 * post-accumulate hook, node `apply` and queued callback gets the `RunningBackward` as its last
 * argument, and `backward(roots, grads, { nestedIn })` nests a backward in one (its callbacks run
 * at the end of the outermost). Nothing ambient is read, so it is right wherever ranks run: two
 * FSDP ranks in one browser page each queue on their own backward, as ranks in one Node thread do.
 *
 * Why handed over rather than ambient: the per-chain slot of [Note: async context] is one variable
 * for the whole thread where there is no AsyncLocalStorage (browsers). There, the second rank's
 * backward took the first rank's, still running, for its parent and queued FSDP's finalizeBackward
 * on it: the callback ran at the first rank's end, before the second rank's reductions, and the
 * ranks' collectives went out of order (a CollectiveMismatchError at the first backward). The other
 * design, an autograd context each rank owns and passes to `backward`, to its units and to its
 * process group, needs one object configured in several places and goes wrong when one
 * `loss.backward()` forgets it; the engine already knows which backward runs a hook, for free.
 *
 * The ambient forms stay for code with no argument to read: `queueCallback()`,
 * `isBackwardRunning()`, and a `backward()` inside a hook without `nestedIn`. With
 * AsyncLocalStorage (Node) they follow the call chain as before, at the same cost (one slot `run`
 * per backward). Without it a backward is nested only when told; `queueCallback()` queues on the
 * one outermost backward running in the thread and throws an `AutogradError` when several run,
 * since it cannot tell which is the caller's; `isBackwardRunning()` says whether any runs in the
 * thread. Queuing on a backward that has finished is an `AutogradError` too.
 */

/**
 * The backward pass running a hook, a node or a callback, passed to each as its last argument
 * ([Note: the running backward]). Pass it on as `backward`'s `nestedIn` to nest a backward in it.
 */
export interface RunningBackward {
  /**
   * Queue `callback` to run once at the end of the outermost backward this one belongs to, after
   * all its nodes and hooks (PyTorch's `queue_callback`). Throws `AutogradError` once that backward
   * has finished.
   */
  queueCallback(callback: BackwardCallback): void;
}

/** A callback queued for the end of a backward; may be async and may queue more. */
export type BackwardCallback = (backward: RunningBackward) => void | Promise<void>;

/**
 * One backward pass as hooks see it: where it nests and the callbacks queued for its end (the
 * engine's task adds the gradient tensors it owns).
 */
export class BackwardRun implements RunningBackward {
  /** Callbacks to run at the end (only the outermost run's list is used). */
  readonly callbacks: BackwardCallback[] = [];
  /** The backward whose end runs the callbacks: this one, or the one it is nested in. */
  readonly outermost: BackwardRun;
  private finished = false;

  constructor(parent: BackwardRun | null) {
    this.outermost = parent?.outermost ?? this;
  }

  queueCallback(callback: BackwardCallback): void {
    const outermost = this.outermost;
    if (outermost.finished) {
      throw new AutogradError(
        'queueCallback',
        'that backward has finished: queue callbacks while it runs (from a hook, a node or another callback of it)',
      );
    }
    outermost.callbacks.push(callback);
  }

  /** The end of the pass: an outermost one takes no more callbacks. */
  end(): void {
    if (this.outermost === this) this.finished = true;
  }
}

/** The outermost backward of the current call chain, with AsyncLocalStorage (Node). */
const currentTask = new ContextSlot<BackwardRun | null>(null);
/** The outermost backwards running in this thread, kept without AsyncLocalStorage (browsers). */
const runningInThread = new Set<BackwardRun>();

/** The run a new backward nests in: the one given, else (Node only) this chain's. */
export function parentTask(nestedIn: RunningBackward | undefined): BackwardRun | null {
  if (nestedIn === undefined) return asyncContextSupported ? currentTask.get() : null;
  if (!(nestedIn instanceof BackwardRun)) {
    throw new ArgumentError(
      'backward',
      'nestedIn must be the RunningBackward that the engine passed to a hook, a node or a callback',
    );
  }
  return nestedIn;
}

/** Run `fn` (a backward's body) with `task` as what the ambient forms see. */
export function asCurrent(task: BackwardRun, fn: () => Promise<void>): Promise<void> {
  if (asyncContextSupported) return currentTask.run(task.outermost, fn);
  if (task.outermost !== task) return fn();
  runningInThread.add(task);
  return fn().finally(() => {
    runningInThread.delete(task);
  });
}

/** The backward that ambient code belongs to, or null; see [Note: the running backward]. */
export function ambientTask(op: string): BackwardRun | null {
  if (asyncContextSupported) return currentTask.get();
  if (runningInThread.size > 1) {
    throw new AutogradError(
      op,
      `${runningInThread.size} backward passes run in this thread and without AsyncLocalStorage (a browser) there is no telling which one is the caller's: use the RunningBackward passed to the hook, node or callback (its last argument)`,
    );
  }
  for (const task of runningInThread) return task;
  return null;
}

/** Whether a backward runs in this call chain (without AsyncLocalStorage: in this thread). */
export function isBackwardRunning(): boolean {
  return asyncContextSupported ? currentTask.get() !== null : runningInThread.size > 0;
}

/**
 * Queue `callback` to run once at the end of the outermost backward of this call chain, after all
 * its nodes and hooks, like PyTorch's `Variable._execution_engine.queue_callback`. Throws
 * `AutogradError` outside a backward, also while another chain's backward runs. Code that has the
 * `RunningBackward` (hooks, nodes and callbacks get it) should call its `queueCallback` instead,
 * which is right without AsyncLocalStorage too ([Note: the running backward]).
 */
export function queueCallback(callback: BackwardCallback): void {
  const task = ambientTask('queueCallback');
  if (task === null) {
    throw new AutogradError(
      'queueCallback',
      'callbacks can only be queued while backward runs (from a hook, a node or another callback of that backward)',
    );
  }
  task.queueCallback(callback);
}
