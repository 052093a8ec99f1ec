import type { Work } from '@webshard/collectives';
import type { Tensor } from '@webshard/tensor-core';
import type { Bucket } from './bucket.js';

/** How a reducer sends its buckets. */
export type ReduceMode =
  /** Each bucket goes as soon as its last gradient arrives, overlapped with backward. */
  | 'overlap'
  /** Every bucket goes at the end of backward (delayAllreduce, the iteration that records order). */
  | 'at-end';

/**
 * [Note: when each bucket goes]
 * In `overlap` mode a bucket's all-reduce starts from the post-accumulate hook of its last
 * gradient; buckets start strictly in plan order (a bucket that fills early waits for the ones
 * before it), so every rank issues the same collectives in the same order whatever order its
 * gradients arrive in. Starting one means packing its gradients into the bucket buffer and issuing
 * the all-reduce without awaiting it: the group runs it while the engine goes on with backward.
 * While one is in flight, every gradient's hook gives it a turn of the thread's event loop
 * (`group.progress()`, [Note: progress turns] in the collectives): on a group whose communication
 * runs on the rank's thread that turn is the only time a bucket moves before the end of backward.
 * At the end of backward (a queued callback) the reducer checks that every bucket started (a
 * bucket that did not names the parameters that got no gradient), then awaits the all-reduces in
 * order and writes each bucket back. In `at-end` mode every bucket is packed and sent from that
 * callback. Nothing here awaits a collective inside a hook.
 */
export class Reducer {
  private readonly bucketOf = new Map<Tensor, number>();
  private readonly ready: Set<Tensor>[];
  private readonly works: (Work | null)[];
  private next = 0;
  private arrived = new Set<Tensor>();

  constructor(
    readonly buckets: readonly Bucket[],
    private readonly mode: ReduceMode,
    private readonly preScale: number,
    private readonly postScale: number,
    private readonly retain: boolean,
    /** One turn for the collectives in flight (`ProcessGroup.progress`). */
    private readonly progress: () => Promise<void> = () => Promise.resolve(),
  ) {
    buckets.forEach((bucket, b) => {
      for (const p of bucket.params) this.bucketOf.set(p, b);
    });
    this.ready = buckets.map(() => new Set());
    this.works = buckets.map(() => null);
  }

  /** Forget the last backward's progress. */
  begin(): void {
    for (const set of this.ready) set.clear();
    this.works.fill(null);
    this.next = 0;
    this.arrived = new Set();
  }

  /** A gradient is ready (called from its post-accumulate hook). */
  async gradReady(param: Tensor): Promise<void> {
    this.arrived.add(param);
    const b = this.bucketOf.get(param);
    if (b === undefined) return;
    this.ready[b]!.add(param);
    if (this.mode !== 'overlap') return;
    while (this.next < this.buckets.length && this.isFull(this.next)) {
      const bucket = this.buckets[this.next]!;
      const index = this.next;
      this.next++;
      await bucket.pack(this.preScale);
      this.works[index] = bucket.allReduce();
    }
    if (this.inFlight()) await this.progress();
  }

  /** Whether a bucket's all-reduce was issued and has not completed. */
  private inFlight(): boolean {
    for (let b = 0; b < this.next; b++) if (!this.works[b]!.isCompleted) return true;
    return false;
  }

  /** The parameters whose gradient did not arrive in this backward. */
  missing(): Tensor[] {
    const out: Tensor[] = [];
    for (const bucket of this.buckets) {
      for (const p of bucket.params) if (!this.arrived.has(p)) out.push(p);
    }
    return out;
  }

  /** The end of backward: send what is left (at-end), await every bucket in order, write back. */
  async finish(): Promise<void> {
    if (this.mode === 'at-end') {
      for (let b = 0; b < this.buckets.length; b++) {
        await this.buckets[b]!.pack(this.preScale);
        this.works[b] = this.buckets[b]!.allReduce();
      }
    }
    for (let b = 0; b < this.buckets.length; b++) {
      await this.works[b]!.wait();
      this.buckets[b]!.unpack(this.postScale, this.retain);
    }
  }

  /** Whether every bucket was sent. */
  get allStarted(): boolean {
    return this.mode === 'at-end' || this.next === this.buckets.length;
  }

  /** Release the buckets' buffers. */
  dispose(): void {
    for (const bucket of this.buckets) bucket.dispose();
  }

  private isFull(b: number): boolean {
    return this.ready[b]!.size === this.buckets[b]!.params.length;
  }
}
