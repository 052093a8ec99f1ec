import type { Backend, RawStorage, RecordedWork } from '../backend/backend.js';
import { sizeClass } from '../memory/caching-allocator.js';
import { currentRecorder, type HostStepRecorder } from './host-step.js';

/** The backend methods a tape records: every kernel of the contract, and host-to-device writes. */
const KERNELS = [
  'fill',
  'copy',
  'cast',
  'copyStrided',
  'unary',
  'binary',
  'where',
  'reduce',
  'softmax',
  'softmaxBackward',
  'scaledMaskedSoftmax',
  'scaledMaskedSoftmaxBackward',
  'layerNorm',
  'layerNormBackward',
  'matmul',
  'matmulStrided',
  'linear',
  'attention',
  'attentionBackward',
  'gather',
  'scatterAdd',
  'crossEntropy',
  'crossEntropyBackward',
  'adam',
  'sgd',
  'checkFinite',
  'axpy',
  'write',
] as const;

/** Methods whose result a replay could not repeat: a capture that calls them is refused. */
const REFUSED = {
  read: 'it reads device memory back outside a host step (a decision on the host)',
  randomUniform: 'it draws random numbers (the generator moves every step)',
  randomNormal: 'it draws random numbers (the generator moves every step)',
} as const;

type Method = (...args: unknown[]) => unknown;

/**
 * One recorded entry: a kernel call with its operands as they were (and, on a backend with a
 * `workRecorder`, the device work it queued, which a replay queues instead of calling it), or a
 * host step.
 */
type Entry = { kernel: Method; args: unknown[]; work?: RecordedWork } | { host: () => unknown };

/** An operand as the kernel saw it: plain objects copied (shape arrays are frozen), host data copied. */
function snapshot(arg: unknown): unknown {
  if (arg === null || typeof arg !== 'object') return arg;
  if (ArrayBuffer.isView(arg)) return (arg as unknown as { slice(): unknown }).slice();
  if (Array.isArray(arg)) return [...arg];
  return { ...(arg as object) };
}

/**
 * Records one step's kernel calls on a backend and plans its memory: see [Note: the captured
 * step] in captured-step.ts. `install` shadows the backend's methods on the instance (its class is
 * untouched); `uninstall` removes the shadows. While installed, storage the step allocates comes
 * from storage it released earlier in the step (same size class) or from the backend, and none of it
 * goes back to the backend: the tape owns it until `releasePlan`.
 */
export class KernelTape implements HostStepRecorder {
  readonly entries: Entry[] = [];
  /** Storage allocated while recording: the plan. */
  readonly owned = new Set<RawStorage>();
  /** Owned storage the step released, by size: free for the step's later allocations. */
  private readonly free = new Map<number, RawStorage[]>();
  /** Why the step cannot be replayed; null while it can. */
  refusal: string | null = null;
  private depth = 0;
  private suspended = 0;
  private readonly originals = new Map<string, Method>();

  constructor(private readonly backend: Backend) {}

  install(): void {
    const target = this.backend as unknown as Record<string, Method>;
    const own = (name: string, wrapper: Method) => {
      this.originals.set(name, target[name]!);
      Object.defineProperty(target, name, { value: wrapper, configurable: true, writable: true });
    };
    for (const name of KERNELS) {
      const original = target[name];
      if (typeof original !== 'function') continue;
      own(name, (...args: unknown[]) => {
        if (this.foreign()) return original.apply(this.backend, args);
        if (this.depth > 0 || this.suspended > 0) return original.apply(this.backend, args);
        // A write's `done` belongs to the caller's one write: a replay writes its own copy.
        const kept = name === 'write' ? args.slice(0, 2) : args;
        const entry: Entry = { kernel: original, args: kept.map(snapshot) };
        this.entries.push(entry);
        this.depth++;
        try {
          const recorder = this.backend.workRecorder;
          if (recorder === undefined) return original.apply(this.backend, args);
          let result: unknown;
          entry.work = recorder.record(() => {
            result = original.apply(this.backend, args);
          });
          return result;
        } finally {
          this.depth--;
        }
      });
    }
    for (const [name, reason] of Object.entries(REFUSED)) {
      const original = target[name]!;
      own(name, (...args: unknown[]) => {
        if (!this.foreign() && this.depth === 0 && this.suspended === 0)
          this.refuse(`the step calls ${name}: ${reason}`);
        return original.apply(this.backend, args);
      });
    }
    const allocate = target.allocate!;
    own('allocate', (byteSize: unknown) => {
      if (this.foreign()) return allocate.call(this.backend, byteSize);
      // Blocks carry their allocator's size class, so a request looks up its class: the plan
      // reuses memory as the caching allocator's pool would in the eager step.
      const reused = this.free.get(sizeClass(byteSize as number))?.pop();
      if (reused !== undefined) return reused;
      const storage = allocate.call(this.backend, byteSize) as RawStorage;
      this.owned.add(storage);
      return storage;
    });
    const release = target.release!;
    own('release', (storage: unknown) => {
      const raw = storage as RawStorage;
      if (this.foreign() && !this.owned.has(raw)) {
        release.call(this.backend, raw);
        return;
      }
      if (!this.owned.has(raw)) {
        this.refuse('the step frees a tensor made before it (a replay would write freed memory)');
        release.call(this.backend, raw);
        return;
      }
      const list = this.free.get(raw.byteSize);
      if (list === undefined) this.free.set(raw.byteSize, [raw]);
      else list.push(raw);
    });
  }

  uninstall(): void {
    const target = this.backend as unknown as Record<string, Method>;
    for (const name of this.originals.keys()) delete target[name];
    this.originals.clear();
  }

  /**
   * True when another call chain than the recording one uses the backend: its work is not the
   * step's, so the capture is refused (a replay would not redo it), and it runs as it would.
   */
  private foreign(): boolean {
    if (currentRecorder() === this) return false;
    this.refuse('another call chain used the backend while the step recorded');
    return true;
  }

  refuse(reason: string): void {
    this.refusal ??= reason;
  }

  hostStep<T>(fn: () => T): T {
    if (this.depth > 0 || this.suspended > 0) return fn();
    this.entries.push({ host: fn });
    this.suspended++;
    let result: T;
    try {
      result = fn();
    } catch (error) {
      this.suspended--;
      throw error;
    }
    if (result instanceof Promise) {
      return result.finally(() => {
        this.suspended--;
      }) as T;
    }
    this.suspended--;
    return result;
  }

  /** Owned storage that is neither free at the end of the step nor in `kept`. */
  escaped(kept: ReadonlySet<RawStorage>): number {
    const free = new Set([...this.free.values()].flat());
    let count = 0;
    for (const s of this.owned) if (!free.has(s) && !kept.has(s)) count++;
    return count;
  }

  /**
   * Run the recorded step again: each kernel with its recorded operands (or its recorded device
   * work), each host step anew.
   */
  async replay(): Promise<void> {
    const backend = this.backend;
    const recorder = backend.workRecorder;
    for (const entry of this.entries) {
      if ('kernel' in entry) {
        if (entry.work !== undefined) recorder!.replay(entry.work);
        else entry.kernel.apply(backend, entry.args);
        continue;
      }
      const result = entry.host();
      if (result instanceof Promise) await result;
    }
  }

  /** Give the storage the step released back to the backend (the plan is done with). */
  releasePlan(): void {
    const recorder = this.backend.workRecorder;
    for (const entry of this.entries) {
      if ('work' in entry && entry.work !== undefined) recorder?.dispose(entry.work);
    }
    const free = [...this.free.values()].flat();
    this.free.clear();
    this.owned.clear();
    for (const s of free) this.backend.release(s);
  }
}
