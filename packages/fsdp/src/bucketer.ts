import type { ProcessGroup } from '@webshard/collectives';
import { type Backend, bytesPerElement, type Tensor } from '@webshard/tensor-core';
import {
  accumulateShardGrad,
  prepareGrad,
  type ReduceSettings,
  reduceScatterGrad,
  reduceShard,
} from './collectives.js';
import type { FlatParameter } from './flat-param.js';
import { flatBuffer } from './host-buffers.js';

interface Pending {
  readonly flat: FlatParameter;
  readonly input: Tensor;
  readonly temps: Tensor[];
  readonly postdivide: number;
  readonly replicate: ProcessGroup | null;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

let nextBackendId = 0;
const backendIds = new WeakMap<Backend, number>();
function backendId(backend: Backend): number {
  const known = backendIds.get(backend);
  if (known !== undefined) return known;
  const id = nextBackendId++;
  backendIds.set(backend, id);
  return id;
}

/**
 * [Note: reduce-scatter buckets]
 * fairscale's `ReduceScatterBucketer`: a flat gradient whose shard is smaller than the bucket
 * (`bucketCapMb`) is not reduced on its own; its pre-divided input waits in a bucket with others of
 * the same dtype and backends, and the bucket goes as one reduce-scatter when the next one would not
 * fit or at the end of backward (`flush`). The bucket's input is laid out rank by rank, each rank's
 * part holding the waiting gradients' shards one after another, so one collective replaces several
 * small ones (each costs a round of messages and a fingerprint) and each rank's output holds its
 * shard of every waiting gradient at the same offsets. Larger gradients go at once. Every rank adds
 * and flushes at the same points of its step, so the collectives stay matched.
 */
export class ReduceScatterBucketer {
  private readonly buckets = new Map<string, Pending[]>();

  constructor(
    private readonly group: ProcessGroup,
    /** Bytes per rank a bucket holds; 0 sends every gradient on its own. */
    private readonly capacityBytes: number,
  ) {}

  /** Reduce `fullGrad` into `flat.shard.grad`, now or with its bucket; resolves when it is there. */
  reduce(flat: FlatParameter, fullGrad: Tensor, settings: ReduceSettings): Promise<void> {
    const element = bytesPerElement(settings.fp32ReduceScatter ? 'f32' : fullGrad.dtype);
    // One rank has nothing to batch: no collective goes ([Note: one rank]).
    if (flat.shardNumel * element >= this.capacityBytes || this.group.size === 1) {
      return reduceScatterGrad(this.group, flat, fullGrad, settings);
    }
    const { input, temps } = prepareGrad(this.group, fullGrad, settings);
    const replicas = settings.replicate?.tag ?? 'none';
    const key = `${backendId(input.backend)}:${backendId(flat.shard.backend)}:${input.dtype}:${replicas}`;
    const waiting = this.buckets.get(key) ?? [];
    const fill = waiting.reduce((n, p) => n + p.flat.shardNumel, 0);
    if (waiting.length > 0 && (fill + flat.shardNumel) * element > this.capacityBytes) {
      this.flushBucket(key);
    }
    return new Promise<void>((resolve, reject) => {
      const bucket = this.buckets.get(key) ?? [];
      bucket.push({
        flat,
        input,
        temps,
        postdivide: settings.postdivide,
        replicate: settings.replicate ?? null,
        resolve,
        reject,
      });
      this.buckets.set(key, bucket);
    });
  }

  /** Send every waiting bucket (the end of backward). */
  flush(): void {
    for (const key of [...this.buckets.keys()]) this.flushBucket(key);
  }

  private flushBucket(key: string): void {
    const items = this.buckets.get(key) ?? [];
    this.buckets.delete(key);
    if (items.length === 0) return;
    const world = this.group.size;
    const fill = items.reduce((n, p) => n + p.flat.shardNumel, 0);
    const first = items[0]!.input;
    const backend = first.backend;
    const input = flatBuffer(this.group, backend, world * fill, first.dtype);
    let offset = 0;
    for (const item of items) {
      const per = item.flat.shardNumel;
      for (let r = 0; r < world; r++) {
        backend.copy(
          {
            ...item.input.kernel('reduceScatter'),
            offset: item.input.offset + r * per,
            shape: [per],
          },
          // The bucket may be a view of registered memory: offsets count from its own start.
          {
            ...input.kernel('reduceScatter'),
            offset: input.offset + r * fill + offset,
            shape: [per],
          },
        );
      }
      offset += per;
      for (const t of item.temps) t.free();
    }
    const out = flatBuffer(this.group, items[0]!.flat.shard.backend, fill, first.dtype);
    const fail = (error: unknown): void => {
      for (const item of items) item.reject(error);
    };
    reduceShard(this.group, input, out, items[0]!.replicate).then(
      () => {
        input.free();
        let at = 0;
        try {
          for (const item of items) {
            const part = out.view([item.flat.shardNumel], at);
            const temps: Tensor[] = [part];
            try {
              accumulateShardGrad(this.group, item.flat, part, item.postdivide, temps);
            } finally {
              for (const t of temps) t.free();
            }
            at += item.flat.shardNumel;
            item.resolve();
          }
        } catch (error) {
          fail(error);
        } finally {
          out.free();
        }
      },
      (error: unknown) => {
        input.free();
        out.free();
        fail(error);
      },
    );
  }
}
