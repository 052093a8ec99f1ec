import { type Backend, bytesPerElement, type Tensor } from '@webshard/tensor-core';
import { moveTensors_ } from '@webshard/tensor-core/backend';

/** Bytes of the tensors moved each way (with their gradients) and the transfers made. */
export interface TransferStats {
  uploadedBytes: number;
  downloadedBytes: number;
  uploads: number;
  downloads: number;
}

function bytesOf(tensors: readonly Tensor[]): number {
  let bytes = 0;
  const seen = new Set<Tensor>();
  for (const t of tensors) {
    for (const x of [t, t.grad]) {
      if (x === null || seen.has(x) || x.isFreed) continue;
      seen.add(x);
      bytes += x.size * bytesPerElement(x.dtype);
    }
  }
  return bytes;
}

/**
 * Uploads and downloads in flight, one chain per slice.
 *
 * A transfer moves tensors in place (`moveTensors_`), so a slice's parameters keep their identity
 * wherever they are. Transfers of one slice run in the order they were asked for (a download that
 * is still reading when the same slice is uploaded again is waited for first); transfers of
 * different slices are independent, which is what lets the next slice's upload and the previous
 * slice's download overlap the current slice's compute. `wait(slice)` awaits a slice's chain;
 * `drain()` awaits them all and rethrows the first failure.
 */
export class TransferQueue {
  private readonly chains = new Map<number, Promise<void>>();
  readonly stats: TransferStats = {
    uploadedBytes: 0,
    downloadedBytes: 0,
    uploads: 0,
    downloads: 0,
  };

  constructor(
    private readonly device: Backend,
    private readonly host: Backend,
  ) {}

  private enqueue(
    slice: number,
    backend: Backend,
    tensors: () => readonly Tensor[],
    after?: () => void,
  ): Promise<void> {
    const previous = this.chains.get(slice) ?? Promise.resolve();
    const next = previous.then(async () => {
      const list = tensors();
      const bytes = bytesOf(list.filter((t) => t.backend !== backend));
      await moveTensors_(list, backend);
      if (backend === this.device) {
        this.stats.uploadedBytes += bytes;
        this.stats.uploads++;
      } else {
        this.stats.downloadedBytes += bytes;
        this.stats.downloads++;
      }
      after?.();
    });
    this.chains.set(slice, next);
    // A failure surfaces where the slice is waited for; keep it from being reported unhandled here.
    next.catch(() => {});
    return next;
  }

  /** Start moving the tensors `tensors()` lists (called when the transfer begins) to the device. */
  upload(slice: number, tensors: () => readonly Tensor[], after?: () => void): Promise<void> {
    return this.enqueue(slice, this.device, tensors, after);
  }

  /** Start moving them to the host; `after` runs once they are there. */
  download(slice: number, tensors: () => readonly Tensor[], after?: () => void): Promise<void> {
    return this.enqueue(slice, this.host, tensors, after);
  }

  /** Resolves when every transfer asked for `slice` so far is done. */
  wait(slice: number): Promise<void> {
    return this.chains.get(slice) ?? Promise.resolve();
  }

  /** Resolves when every transfer is done; rejects with the first failure. */
  async drain(): Promise<void> {
    await Promise.all([...this.chains.values()]);
  }
}
