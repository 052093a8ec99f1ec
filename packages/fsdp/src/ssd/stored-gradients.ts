import { Tensor } from '@webshard/tensor-core';
import type { FlatParameter } from '../flat-param.js';
import { readInto, readIntoSync, writeFrom } from './shard-io.js';
import type { ShardStore } from './shard-store.js';

/**
 * [Note: gradients in a store]
 * With `ssdOffload: { store, offloadGradients: true }` a unit's reduced gradient shard goes to the
 * store too (`<shard key>.grad`) at the end of backward, after every reduction completed, and its
 * memory is freed; `shard.grad` stays the (freed) tensor, so whatever steps reads it back first:
 * - the step (the optimizer's own `step()` through the shard's holder, or `stepOffloaded`) reads
 *   each gradient back with its shard and state, steps, and frees all three: at most one unit's
 *   gradient is in memory at a time.
 * - a backward before the step (accumulating over several synchronized backwards) reads the stored
 *   gradients of the units it reduces back first, so the sum is what it is in memory.
 * - `clipShardedGradNorm` streams: the local norm reads each stored gradient once, one at a time,
 *   into a tensor its partial norm is computed on by the kernels `clipGradNorm` uses, and the
 *   partials are summed by the same reduction in the same order; the clip factor is kept and
 *   multiplied in, in f32 as the in-memory clip multiplies, when the gradient is read back.
 * - `zeroGrad` (setting gradients to none, the default) drops them: a stored gradient counts only
 *   while `shard.grad` is still the tensor it was stored from.
 * The arithmetic is the in-memory FSDP's, the clip's included: training is bit for bit the same.
 */
export class StoredGradients {
  /** The (freed) gradient tensor of each flat parameter whose gradient is in the store. */
  private readonly stored = new Map<FlatParameter, Tensor>();
  /** The factor a clip applied to the stored gradients, multiplied in when they are read. */
  private scale = 1;

  constructor(
    private readonly store: ShardStore,
    /** Each flat parameter's shard key; its gradient is `<key>.grad`. */
    private readonly keys: ReadonlyMap<FlatParameter, string>,
    /** Whether gradients go to the store at all (`offloadGradients`). */
    readonly enabled: boolean,
  ) {}

  /** Whether `flat`'s gradient is in the store (and was not dropped by `zeroGrad` since). */
  has(flat: FlatParameter): boolean {
    const grad = this.stored.get(flat);
    if (grad === undefined) return false;
    if (flat.shard.grad === grad) return true;
    this.stored.delete(flat);
    return false;
  }

  /** Whether any gradient of the unit is in the store. */
  any(): boolean {
    return [...this.keys.keys()].some((flat) => this.has(flat));
  }

  /** End of backward: write each reduced gradient shard, free it. */
  async offload(): Promise<void> {
    if (!this.enabled) return;
    for (const [flat, key] of this.keys) {
      const grad = flat.shard.grad;
      if (grad === null || grad.isFreed) continue;
      await writeFrom(this.store, `${key}.grad`, grad);
      grad.free();
      this.stored.set(flat, grad);
    }
    this.scale = 1;
  }

  /** Read `flat`'s stored gradient back into `shard.grad`, if it is in the store. */
  async load(flat: FlatParameter): Promise<void> {
    if (!this.has(flat)) return;
    await readInto(this.store, `${this.keys.get(flat)}.grad`, flat.shard.grad!, flat, this.scale);
    this.stored.delete(flat);
  }

  /** `load`, synchronously, for the optimizer's own step (`op` names it in errors). */
  loadSync(op: string, flat: FlatParameter): void {
    if (!this.has(flat)) return;
    const key = `${this.keys.get(flat)}.grad`;
    readIntoSync(op, this.store, key, flat.shard.grad!, flat, this.scale);
    this.stored.delete(flat);
  }

  /** Read every stored gradient back (a backward accumulates into it). */
  async loadAll(): Promise<void> {
    for (const flat of this.keys.keys()) await this.load(flat);
    this.scale = 1;
  }

  /** Every gradient was read back or dropped by a step: no clip factor is pending. */
  stepped(): void {
    if (!this.any()) this.scale = 1;
  }

  /**
   * `shard`'s gradient as it is in the store (with a pending clip's factor applied, as a read-back
   * applies it), in a new tensor the caller frees; null when it is not there.
   */
  async gradOf(shard: Tensor): Promise<Tensor | null> {
    for (const [flat, key] of this.keys) {
      if (flat.shard !== shard || !this.has(flat)) continue;
      const host = new Float32Array(flat.shard.size);
      await this.store.read(`${key}.grad`, new Uint8Array(host.buffer));
      const scale = this.scale;
      if (scale !== 1) for (let i = 0; i < host.length; i++) host[i] = host[i]! * scale;
      const grad = Tensor.empty(shard.backend, [host.length], 'f32');
      grad.write(host);
      return grad;
    }
    return null;
  }

  /** A clip of the stored gradients by `coef`, applied when they are read back. */
  scaleBy(coef: number): void {
    this.scale = Math.fround(this.scale * coef);
  }
}
