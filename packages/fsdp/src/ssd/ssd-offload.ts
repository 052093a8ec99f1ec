import { type Optimizer, Tensor } from '@webshard/tensor-core';
import { FsdpConfigError } from '../errors.js';
import type { FlatParameter } from '../flat-param.js';
import type { ShardStore, ShardStoreStats, SsdOffloadOptions } from './shard-store.js';

let serial = 0;

/**
 * [Note: shards in a store]
 * With `ssdOffload`, a unit's FP32 shards (fairscale's `ssd_offload`) and their optimizer state
 * live in a `ShardStore` between uses, and hold no memory ([Note: shard stores]):
 * - forward and pre-backward: each shard is read in (`load`) just before its all-gather and freed
 *   (`release`) once the gather completed; the file is still current, so nothing is written. The
 *   first release writes it. Such a unit is not prefetched; its shard can be read ahead
 *   ([Note: reading ahead from a store]).
 * - the step: `stepOffloaded(model, optimizer)` steps one flat parameter at a time: its shard and
 *   its optimizer state read in, the optimizer run with every other parameter's gradient set aside,
 *   then shard and state written back and freed. At most one unit's shard and state are in memory.
 * Gradients stay in memory (one shard each, like the in-memory FSDP) unless `offloadGradients`
 * ([Note: gradients in a store]). The optimizer's arithmetic
 * is unchanged, so training equals the in-memory FSDP bit for bit. The sharded checkpoint reads
 * the shards and the optimizer's state in and frees them again after a save, or writes back what
 * a load replaced ([Note: sharded checkpoints of shards in a store]); so do the optimizer state
 * helpers (`localOptimStateDict`, `gatherFullOptimStateDict` and their loads: [Note: optimizer
 * state in a store]). Anything else that reads a shard or its state outside these (the optimizer's
 * own `step`, the tensors of its own `stateDict()`) finds it freed and throws `FreedTensorError`
 * naming it; `summonFullParams` (and so the full state dict) reads the shards in and writes back
 * what it changed. Keys are `ssd<serial>.<shard name>.rank<r>`, unique in a process.
 */
export class SsdShards {
  readonly store: ShardStore;
  private readonly keys = new Map<FlatParameter, string>();
  /** Shards whose file does not hold their current value (never written, or read and stepped). */
  private readonly dirty = new Set<FlatParameter>();
  /**
   * With `offloadGradients`: the (freed) gradient tensor of each flat parameter whose gradient is
   * in the store. It counts only while `shard.grad` is still that tensor: `zeroGrad` drops it.
   */
  private readonly storedGrads = new Map<FlatParameter, Tensor>();
  /** The factor a clip applied to the stored gradients, multiplied in when they are read. */
  private gradScale = 1;
  /** A `readAhead` in flight (its errors dropped: `load` reads again what it did not). */
  private ahead: Promise<void> | null = null;
  /** State tensors `loadAll` read in from their (current) files: freed unwritten unless changed. */
  private readonly readState = new Set<Tensor>();

  /** `offloadGradients` ([Note: gradients in a store]). */
  readonly offloadsGradients: boolean;
  /** `readAhead` ([Note: reading ahead from a store]). */
  readonly readsAhead: boolean;

  constructor(
    store: ShardStore,
    rank: number,
    flats: readonly FlatParameter[],
    options: Pick<SsdOffloadOptions, 'offloadGradients' | 'readAhead'> = {},
  ) {
    this.store = store;
    this.offloadsGradients = options.offloadGradients === true;
    this.readsAhead = options.readAhead === true;
    const id = serial++;
    for (const flat of flats) {
      this.keys.set(
        flat,
        `ssd${id}.${flat.shard.name ?? 'flat'}.rank${rank}`.replace(/[^\w.-]/g, '_'),
      );
      this.dirty.add(flat);
    }
  }

  /** Read back from the store every shard that is freed and is about to be gathered. */
  async load(): Promise<void> {
    await this.settle();
    await this.readShards();
  }

  /**
   * With `readAhead`: start `load` ahead, while another unit computes ([Note: reading ahead from a
   * store]); the next `load` (or any other use of the shards) waits for it. A failed read-ahead is
   * retried there. Without it, nothing.
   */
  readAhead(): void {
    if (!this.readsAhead || this.ahead !== null) return;
    const read = this.readShards();
    this.ahead = read.then(
      () => {},
      () => {},
    );
  }

  /** Wait for a read-ahead in flight, so nothing reads or frees a shard under it. */
  private async settle(): Promise<void> {
    const ahead = this.ahead;
    if (ahead === null) return;
    await ahead;
    this.ahead = null;
  }

  private async readShards(): Promise<void> {
    for (const [flat, key] of this.keys) {
      if (flat.shardedState === 'sharded' && flat.shard.isFreed)
        await readInto(this.store, key, flat.shard, flat);
    }
  }

  /** The shards were changed in memory (written back by `summonFullParams`): write them on release. */
  markDirty(): void {
    for (const flat of this.keys.keys()) if (!flat.shard.isFreed) this.dirty.add(flat);
  }

  /** Write the shards whose file is stale, then free every shard's memory. */
  async release(): Promise<void> {
    await this.settle();
    for (const [flat, key] of this.keys) {
      if (flat.shard.isFreed) continue;
      if (this.dirty.has(flat)) {
        await writeFrom(this.store, key, flat.shard);
        this.dirty.delete(flat);
      }
      flat.shard.free();
    }
  }

  /** Whether `flat`'s gradient is in the store (and was not dropped by `zeroGrad` since). */
  private hasStoredGrad(flat: FlatParameter): boolean {
    const grad = this.storedGrads.get(flat);
    if (grad === undefined) return false;
    if (flat.shard.grad === grad) return true;
    this.storedGrads.delete(flat);
    return false;
  }

  /** Whether any gradient of this unit is in the store. */
  hasStoredGradients(): boolean {
    return [...this.keys.keys()].some((flat) => this.hasStoredGrad(flat));
  }

  /** End of backward, with `offloadGradients`: write each reduced gradient shard, free it. */
  async offloadGradients(): Promise<void> {
    if (!this.offloadsGradients) return;
    for (const [flat, key] of this.keys) {
      const grad = flat.shard.grad;
      if (grad === null || grad.isFreed) continue;
      await writeFrom(this.store, `${key}.grad`, grad);
      grad.free();
      this.storedGrads.set(flat, grad);
    }
    this.gradScale = 1;
  }

  /** Read every stored gradient back into its shard's `grad` (a backward accumulates into it). */
  async loadGradients(): Promise<void> {
    for (const [flat, key] of this.keys) {
      if (!this.hasStoredGrad(flat)) continue;
      await readInto(this.store, `${key}.grad`, flat.shard.grad!, flat, this.gradScale);
      this.storedGrads.delete(flat);
    }
    this.gradScale = 1;
  }

  /**
   * `shard`'s gradient as it is in the store (with a pending clip's factor applied, as a read-back
   * applies it), in a new tensor the caller frees; null when this unit does not hold it there.
   */
  async storedGradOf(shard: Tensor): Promise<Tensor | null> {
    for (const [flat, key] of this.keys) {
      if (flat.shard !== shard || !this.hasStoredGrad(flat)) continue;
      const host = new Float32Array(flat.shard.size);
      await this.store.read(`${key}.grad`, new Uint8Array(host.buffer));
      const scale = this.gradScale;
      if (scale !== 1) for (let i = 0; i < host.length; i++) host[i] = host[i]! * scale;
      const grad = Tensor.empty(shard.backend, [host.length], 'f32');
      grad.write(host);
      return grad;
    }
    return null;
  }

  /** A clip of the stored gradients by `coef`, applied when they are read back. */
  scaleStoredGradients(coef: number): void {
    this.gradScale = Math.fround(this.gradScale * coef);
  }

  /** Read every freed shard, and its state in `optimizer` where it has one, into memory. */
  async loadAll(optimizer: Optimizer<object, object> | undefined): Promise<void> {
    await this.settle();
    for (const [flat, key] of this.keys) {
      if (flat.shard.isFreed) await readInto(this.store, key, flat.shard, flat);
      for (const [name, t] of stateTensors(optimizer?.state.get(flat.shard) ?? {})) {
        if (!t.isFreed) continue;
        await readInto(this.store, `${key}.${name}`, t, flat);
        this.readState.add(t);
      }
    }
  }

  /**
   * Free every shard and state tensor again; `changed` (a load replaced them): write each back
   * first. Unchanged ones `loadAll` read are freed as read (their files are current); a state
   * tensor that was in memory already (an `optimizer.loadStateDict` since the last step) is written.
   */
  async releaseAll(
    optimizer: Optimizer<object, object> | undefined,
    changed: boolean,
  ): Promise<void> {
    await this.settle();
    for (const [flat, key] of this.keys) {
      if (changed && !flat.shard.isFreed) this.dirty.add(flat);
      for (const [name, t] of stateTensors(optimizer?.state.get(flat.shard) ?? {})) {
        if (t.isFreed) continue;
        if (changed || !this.readState.has(t)) await writeFrom(this.store, `${key}.${name}`, t);
        t.free();
      }
    }
    this.readState.clear();
    await this.release();
  }

  /** Step `optimizer` on each flat parameter in turn, shard and state read in and written back. */
  async step(optimizer: Optimizer<object, object>): Promise<void> {
    await this.settle();
    for (const [flat, key] of this.keys) {
      if (this.hasStoredGrad(flat)) {
        await readInto(this.store, `${key}.grad`, flat.shard.grad!, flat, this.gradScale);
        this.storedGrads.delete(flat);
      }
      const grad = flat.shard.grad;
      if (grad === null || grad.isFreed) continue;
      if (flat.shard.isFreed) await readInto(this.store, key, flat.shard, flat);
      const state = optimizer.state.get(flat.shard);
      const fields = state === undefined ? [] : stateTensors(state);
      for (const [name, t] of fields) {
        if (t.isFreed) await readInto(this.store, `${key}.${name}`, t, flat);
      }
      stepOnly(optimizer, flat.shard);
      await writeFrom(this.store, key, flat.shard);
      this.dirty.delete(flat);
      flat.shard.free();
      for (const [name, t] of stateTensors(optimizer.state.get(flat.shard) ?? {})) {
        await writeFrom(this.store, `${key}.${name}`, t);
        t.free();
      }
      // Stepped: with offloadGradients the gradient is not kept either (zeroGrad comes next).
      if (this.offloadsGradients) grad.free();
    }
    this.gradScale = 1;
  }
}

/**
 * [Note: reading ahead from a store]
 * A unit with `ssdOffload` is never prefetched: its shard is not in memory when the prefetch would
 * gather it. With `ssdOffload: { store, readAhead: true }`, where FSDP prefetches the next unit
 * (`limitAllGathers`, the forward and backward orders) `readAhead` starts that unit's shard's read
 * from the store while the current unit gathers and computes, and its own forward (or pre-backward)
 * `load` waits for that read, then gathers as before. A read-ahead holds one shard more at a time.
 * Every other use of the shards (release, the step, a checkpoint) waits for a read in flight
 * first, so a late read never lands on a shard stepped since. It overlaps only where the store's
 * reads run beside the computation: `NodeFileStore` reads through libuv's thread pool; `OpfsStore`'s
 * synchronous handles block the worker, so there it only reorders. Values are the same bytes either
 * way. It is off by default: on the 2-core machine it was measured on, with the files in the page
 * cache, it made no difference beyond the noise (packages/fsdp/README.md, benchmark).
 */

/**
 * [Note: gradients in a store]
 * With `ssdOffload: { store, offloadGradients: true }` a unit's reduced gradient shard goes to the
 * store too (`<shard key>.grad`) at the end of backward, after every reduction completed, and its
 * memory is freed; `shard.grad` stays the (freed) tensor, so an `optimizer.step()` that would
 * miss it throws `FreedTensorError` naming it rather than skipping the parameter.
 * - the step (`stepOffloaded`) reads each gradient back with its shard and state, steps, and frees
 *   all three: at most one unit's gradient is in memory at a time.
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

/** The tensors of one parameter's optimizer state (Adam's `expAvg`, `expAvgSq`; SGD's momentum). */
function stateTensors(state: object): [string, Tensor][] {
  return Object.entries(state).filter((e): e is [string, Tensor] => e[1] instanceof Tensor);
}

/** Run `optimizer.step()` on `shard` alone: every other parameter's gradient is set aside. */
function stepOnly(optimizer: Optimizer<object, object>, shard: Tensor): void {
  const aside: [Tensor, Tensor][] = [];
  for (const group of optimizer.paramGroups) {
    for (const p of group.params) {
      if (p === shard || p.grad === null) continue;
      aside.push([p, p.grad]);
      p.grad = null;
    }
  }
  try {
    optimizer.step();
  } finally {
    for (const [p, g] of aside) p.grad = g;
  }
}

async function readInto(
  store: ShardStore,
  key: string,
  target: Tensor,
  flat: FlatParameter,
  scale = 1,
): Promise<void> {
  const host = new Float32Array(target.size);
  await store.read(key, new Uint8Array(host.buffer));
  if (scale !== 1) for (let i = 0; i < host.length; i++) host[i] = host[i]! * scale;
  const backend = target.backend;
  const buffer = flat.placement.allocate(backend, target.size, 'f32');
  try {
    backend.write(buffer.kernel('ssdOffload'), host);
    target.setData(buffer);
  } finally {
    buffer.free();
  }
}

async function writeFrom(store: ShardStore, key: string, source: Tensor): Promise<void> {
  const host = (await source.read()) as Float32Array;
  await store.write(key, new Uint8Array(host.buffer, host.byteOffset, host.byteLength));
}

/** What `stepOffloaded` needs of a model: its units' offloaded shards. */
export interface OffloadedModel {
  units(): { readonly ssdShards: SsdShards | null; readonly unitName: string }[];
}

/**
 * The optimizer step of a model wrapped with `ssdOffload` ([Note: shards in a store]): each flat
 * parameter's shard and optimizer state read from the store, stepped, written back and freed, so
 * at most one unit's are in memory. Call it instead of `optimizer.step()`; `zeroGrad` as usual. A
 * model without `ssdOffload` is a `FsdpConfigError`.
 */
export async function stepOffloaded(
  model: OffloadedModel,
  optimizer: Optimizer<object, object>,
): Promise<void> {
  const units = model.units();
  const without = units.find((u) => u.ssdShards === null);
  if (without !== undefined) {
    throw new FsdpConfigError(
      'stepOffloaded',
      `unit '${without.unitName}' was not wrapped with ssdOffload: step it with optimizer.step()`,
    );
  }
  for (const unit of units) await unit.ssdShards!.step(optimizer);
}

/**
 * [Note: sharded checkpoints of shards in a store]
 * `saveShardedCheckpoint` and `loadShardedCheckpoint` of a model with `ssdOffload` run `fn` with
 * every unit's shards and optimizer state read in from the store (`loadAll`), as the checkpoint
 * needs them; then free them again (`releaseAll`): after a save as they were (their files are
 * current), after a load (`fn` resolving `true`) written back first, shard and state, so the next
 * forward and `stepOffloaded` read the loaded values. While it runs a rank holds its whole shard
 * and state (12 bytes a parameter with Adam over the ranks), as the in-memory FSDP always does; the
 * checkpoint encodes them into one file a rank in any case. A failed load changes nothing.
 */
export async function withShardsInMemory<T>(
  model: OffloadedModel,
  optimizer: Optimizer<object, object> | undefined,
  fn: () => Promise<{ value: T; changed: boolean }>,
): Promise<T> {
  const shards = model
    .units()
    .map((u) => u.ssdShards)
    .filter((s): s is SsdShards => s !== null);
  let changed = false;
  try {
    for (const s of shards) await s.loadAll(optimizer);
    const result = await fn();
    changed = result.changed;
    return result.value;
  } finally {
    for (const s of shards) await s.releaseAll(optimizer, changed);
  }
}

/** The bytes every unit's store moved, summed over distinct stores. */
export function ssdStats(model: OffloadedModel): ShardStoreStats {
  const stores = new Set(model.units().map((u) => u.ssdShards?.store));
  const total = { bytesRead: 0, bytesWritten: 0, reads: 0, writes: 0 };
  for (const store of stores) {
    if (store === undefined) continue;
    const s = store.stats();
    total.bytesRead += s.bytesRead;
    total.bytesWritten += s.bytesWritten;
    total.reads += s.reads;
    total.writes += s.writes;
  }
  return total;
}
