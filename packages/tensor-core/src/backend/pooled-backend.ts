import { bytesPerElement, type HostArray, hostArrayFor } from '../dtype.js';
import { ArgumentError, BackendError } from '../errors.js';
import type { Block, CachingAllocator, MemoryStats } from '../memory/caching-allocator.js';
import type { KernelTensor, RawStorage } from './backend.js';

/**
 * Checks `Backend.read`'s `into` before anything is read: the host array type of the tensor's
 * dtype (`hostArrayFor`), with at least the tensor's elements.
 */
export function checkReadTarget(src: KernelTensor, into: HostArray): void {
  const size = src.shape.reduce((a, b) => a * b, 1);
  const type = hostArrayFor(src.dtype, 0).constructor;
  if (into.constructor !== type || into.length < size) {
    throw new ArgumentError(
      'read',
      `into must be a ${type.name} of at least ${size} elements (${size * bytesPerElement(src.dtype)} bytes) for a ${src.dtype} tensor of shape [${src.shape.join(', ')}], got a ${into.constructor.name} of ${into.length} elements`,
    );
  }
}

/** A backend's lifecycle: kernels and allocations are refused once it is disposed. */
export type BackendLifecycle = 'live' | 'disposed';

/**
 * The memory half of the `Backend` contract, the same for every backend: storage comes from a
 * `CachingAllocator` of the backend's raw buffers (ArrayBuffer, GPUBuffer), and a disposed backend
 * refuses further work. Subclasses add transfers and kernels.
 */
export abstract class PooledBackend<B> {
  protected lifecycle: BackendLifecycle = 'live';

  protected constructor(
    protected readonly allocator: CachingAllocator<B>,
    /** How errors name the backend: `the cpu backend was disposed`. */
    private readonly backendName: string,
  ) {}

  /** Throws `BackendError` naming `op` when the backend was disposed. */
  protected assertLive(op: string): void {
    if (this.lifecycle === 'disposed') {
      throw new BackendError(op, `the ${this.backendName} backend was disposed`);
    }
  }

  allocate(byteSize: number): RawStorage {
    this.assertLive('allocate');
    return this.allocator.allocate(byteSize);
  }

  release(storage: RawStorage): void {
    if (this.lifecycle === 'disposed') return;
    this.allocator.release(storage as Block<B>);
  }

  memoryStats(): MemoryStats {
    return this.allocator.stats();
  }

  resetPeakMemoryStats(): void {
    this.allocator.resetPeak();
  }

  setMemoryLimit(bytes: number | undefined): void {
    this.allocator.setLimit(bytes);
  }

  emptyCache(): void {
    this.allocator.emptyCache();
  }
}
