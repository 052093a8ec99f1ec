import type { Backend, RawStorage } from './backend/backend.js';
import { BackendError } from './errors.js';

/**
 * Reference-counted backend storage. Tensors and views that share it each hold one reference; the
 * last release returns the memory to the backend's caching allocator.
 */
export class TensorStorage {
  private refs = 1;
  constructor(
    readonly backend: Backend,
    readonly raw: RawStorage,
  ) {}

  static allocate(backend: Backend, byteSize: number): TensorStorage {
    return new TensorStorage(backend, backend.allocate(Math.max(byteSize, 4)));
  }

  get refCount(): number {
    return this.refs;
  }

  get isReleased(): boolean {
    return this.refs === 0;
  }

  retain(): this {
    if (this.refs === 0) throw new BackendError('storage', 'retain of released storage');
    this.refs++;
    return this;
  }

  release(): void {
    if (this.refs === 0) return;
    this.refs--;
    if (this.refs === 0) this.backend.release(this.raw);
  }
}
