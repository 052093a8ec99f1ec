import type { Optimizer, Tensor } from '@webshard/tensor-core';
import { holdParameter } from '@webshard/tensor-core/autograd';
import { FsdpStateError } from '../errors.js';
import type { FlatParameter } from '../flat-param.js';
import {
  checkSynchronous,
  readInto,
  readIntoSync,
  stateTensors,
  writeFrom,
  writeFromSync,
} from './shard-io.js';
import type { ShardStore, SsdOffloadOptions } from './shard-store.js';
import { StoredGradients } from './stored-gradients.js';

let serial = 0;

/** What `gatherAhead` needs of a unit's flat parameters: issue their gathers and wait for them. */
export interface Gatherable {
  /** Issue the all-gathers (a unit's `FsdpParamGroup.unshard`). */
  unshard(): void;
  /** Resolve once they completed. */
  waitForUnshard(): Promise<void>;
}

/**
 * [Note: shards in a store]
 * With `ssdOffload`, a unit's FP32 shards (fairscale's `ssd_offload`) and their optimizer state
 * live in a `ShardStore` between uses, and hold no memory ([Note: shard stores]):
 * - forward and pre-backward: each shard is read in (`load`) just before its all-gather and freed
 *   (`release`) once the gather completed; the file is still current, so nothing is written. The
 *   first release writes it. Where FSDP prefetches, the next unit's shard is read and its gather
 *   issued ahead ([Note: prefetching shards from a store]).
 * - the step: the optimizer's own `step()` steps one flat parameter at a time through the shard's
 *   holder ([Note: the optimizer's own step through a store]): its shard, gradient and state read
 *   in, stepped, written back and freed. At most one unit's shard and state are in memory.
 *   `stepOffloaded(model, optimizer)` does the same asynchronously, for stores without synchronous
 *   reads and writes (OPFS).
 * Gradients stay in memory (one shard each, like the in-memory FSDP) unless `offloadGradients`
 * ([Note: gradients in a store]). The optimizer's arithmetic is unchanged, so training equals the
 * in-memory FSDP bit for bit. The sharded checkpoint reads the shards and the optimizer's state in
 * and frees them again after a save, or writes back what a load replaced ([Note: sharded
 * checkpoints of shards in a store]); so do the optimizer state helpers (`localOptimStateDict`,
 * `gatherFullOptimStateDict` and their loads: [Note: optimizer state in a store]), and the
 * optimizer's own `stateDict()` reads the state in. `summonFullParams` (and so the full state dict)
 * reads the shards in and writes back what it changed. Keys are `ssd<serial>.<shard name>.rank<r>`,
 * unique in a process.
 */
export class SsdShards {
  readonly store: ShardStore;
  private readonly keys = new Map<FlatParameter, string>();
  /** Shards whose file does not hold their current value (never written, or read and stepped). */
  private readonly dirty = new Set<FlatParameter>();
  /** Gradients in the store, with `offloadGradients` ([Note: gradients in a store]). */
  private readonly grads: StoredGradients;
  /** A read-ahead or a prefetch in flight (its errors dropped: `load` reads again what it did not). */
  private ahead: Promise<void> | null = null;
  /** State tensors read in from their (current) files: freed unwritten unless changed. */
  private readonly readState = new Set<Tensor>();
  /** While `step` runs: the holders stand aside, `step` reads and writes itself. */
  private stepping = false;

  /** `offloadGradients` ([Note: gradients in a store]). */
  readonly offloadsGradients: boolean;
  /** `readAhead` ([Note: prefetching shards from a store]). */
  readonly readsAhead: boolean;

  constructor(
    store: ShardStore,
    private readonly rank: number,
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
      holdParameter(flat.shard, {
        acquire: (_param, state, use) => this.acquire(flat, state, use),
        afterStep: (_param, state) => this.afterStep(flat, state),
      });
    }
    this.grads = new StoredGradients(store, this.keys, this.offloadsGradients);
  }

  /** Read back from the store every shard that is freed and is about to be gathered. */
  async load(): Promise<void> {
    await this.settle();
    await this.readShards();
  }

  /**
   * With `readAhead`: start reading the shards in, while another unit computes ([Note: prefetching
   * shards from a store]); the next `load` (or any other use of the shards) waits for it. A failed
   * read-ahead is retried there. Without it, nothing.
   */
  readAhead(): void {
    if (!this.readsAhead || this.ahead !== null) return;
    this.ahead = this.readShards().then(
      () => {},
      () => {},
    );
  }

  /**
   * The prefetch of a unit with shards in a store ([Note: prefetching shards from a store]): read
   * its shards in (or wait for their read-ahead), issue its gathers (`group.unshard`) and return;
   * the shards are freed once the gathers complete, and every other use of them waits for that.
   */
  async gatherAhead(group: Gatherable): Promise<void> {
    await this.load();
    group.unshard();
    this.ahead = group.waitForUnshard().then(
      () => this.freeShards(),
      () => {},
    );
    this.ahead.catch(() => {});
  }

  /** Wait for a read-ahead or prefetch in flight, so nothing reads or frees a shard under it. */
  async settle(): Promise<void> {
    while (this.ahead !== null) {
      const ahead = this.ahead;
      await ahead;
      if (this.ahead === ahead) this.ahead = null;
    }
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
    await this.freeShards();
  }

  private async freeShards(): Promise<void> {
    for (const [flat, key] of this.keys) {
      if (flat.shard.isFreed) continue;
      if (this.dirty.has(flat)) {
        await writeFrom(this.store, key, flat.shard);
        this.dirty.delete(flat);
      }
      flat.shard.free();
    }
  }

  /** Whether any gradient of this unit is in the store. */
  hasStoredGradients(): boolean {
    return this.grads.any();
  }

  /** End of backward, with `offloadGradients`: write each reduced gradient shard, free it. */
  offloadGradients(): Promise<void> {
    return this.grads.offload();
  }

  /** Read every stored gradient back into its shard's `grad` (a backward accumulates into it). */
  loadGradients(): Promise<void> {
    return this.grads.loadAll();
  }

  /**
   * `shard`'s gradient as it is in the store (with a pending clip's factor applied, as a read-back
   * applies it), in a new tensor the caller frees; null when this unit does not hold it there.
   */
  storedGradOf(shard: Tensor): Promise<Tensor | null> {
    return this.grads.gradOf(shard);
  }

  /** A clip of the stored gradients by `coef`, applied when they are read back. */
  scaleStoredGradients(coef: number): void {
    this.grads.scaleBy(coef);
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
   * first. Unchanged ones read in from their files are freed as read; a state tensor that was in
   * memory already (an `optimizer.loadStateDict` since the last step) is written.
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

  /**
   * The optimizer is about to use `flat`'s shard ([Note: the optimizer's own step through a
   * store]): for a step, read its gradient, shard and state in where they are freed; for a state
   * dict, its state.
   */
  private acquire(flat: FlatParameter, state: object | undefined, use: 'step' | 'stateDict'): void {
    if (this.stepping) return;
    const op = `optimizer.${use}`;
    const key = this.keys.get(flat)!;
    if (use === 'step') {
      if (this.ahead !== null) {
        throw new FsdpStateError(
          op,
          key,
          this.rank,
          'reading ahead',
          ['IDLE'],
          'a read of this shard is still in flight: step after the backward completed',
        );
      }
      checkSynchronous(op, this.store, flat.shard);
      this.grads.loadSync(op, flat);
      if (flat.shard.isFreed) readIntoSync(op, this.store, key, flat.shard, flat);
    }
    for (const [name, t] of stateTensors(state ?? {})) {
      if (!t.isFreed) continue;
      readIntoSync(op, this.store, `${key}.${name}`, t, flat);
      this.readState.add(t);
    }
  }

  /** The optimizer stepped `flat`'s shard: write shard and state back and free them, and the gradient. */
  private afterStep(flat: FlatParameter, state: object): void {
    if (this.stepping) return;
    const op = 'optimizer.step';
    const key = this.keys.get(flat)!;
    writeFromSync(op, this.store, key, flat.shard);
    this.dirty.delete(flat);
    flat.shard.free();
    for (const [name, t] of stateTensors(state)) {
      writeFromSync(op, this.store, `${key}.${name}`, t);
      this.readState.delete(t);
      t.free();
    }
    // Stepped: with offloadGradients the gradient is not kept either (zeroGrad comes next).
    if (this.offloadsGradients) flat.shard.grad?.free();
    this.grads.stepped();
  }

  /**
   * Step `optimizer` on each flat parameter in turn, shard, gradient and state read in and written
   * back asynchronously (`stepOffloaded`).
   */
  async step(optimizer: Optimizer<object, object>): Promise<void> {
    await this.settle();
    for (const [flat, key] of this.keys) {
      await this.grads.load(flat);
      const grad = flat.shard.grad;
      if (grad === null || grad.isFreed) continue;
      if (flat.shard.isFreed) await readInto(this.store, key, flat.shard, flat);
      for (const [name, t] of stateTensors(optimizer.state.get(flat.shard) ?? {})) {
        if (t.isFreed) await readInto(this.store, `${key}.${name}`, t, flat);
      }
      this.stepping = true;
      try {
        stepOnly(optimizer, flat.shard);
      } finally {
        this.stepping = false;
      }
      await writeFrom(this.store, key, flat.shard);
      this.dirty.delete(flat);
      flat.shard.free();
      for (const [name, t] of stateTensors(optimizer.state.get(flat.shard) ?? {})) {
        await writeFrom(this.store, `${key}.${name}`, t);
        this.readState.delete(t);
        t.free();
      }
      if (this.offloadsGradients) grad.free();
    }
    this.grads.stepped();
  }
}

/**
 * [Note: the optimizer's own step through a store]
 * fairscale's loop is unchanged under `ssd_offload`: `optimizer.step()`, `optimizer.state_dict()`.
 * Here each shard of a unit with `ssdOffload` has a `ParamHolder` (tensor-core's [Note: parameters
 * held elsewhere]) that every optimizer calls around its use of the shard, synchronously, as
 * `step()` and `stateDict()` are synchronous:
 * - before a step reads a shard: its stored gradient (`offloadGradients`), the shard and its
 *   optimizer state read in with the store's `readSync`; after the step: shard and state written
 *   with `writeSync` (the shard's bytes in place, on the CPU backend) and freed, the gradient too
 *   with `offloadGradients`. So the step holds one flat parameter's shard, state (and gradient) at
 *   a time, as `stepOffloaded` does, and moves the same bytes.
 * - before `stateDict()` hands out a shard's state: the state read in, current with its file; it
 *   stays in memory (the dict holds the optimizer's own tensors, as PyTorch's does) until the next
 *   step writes and frees it, or a checkpoint or state-dict helper frees it unwritten.
 * - the optimizer's own `loadStateDict` puts new state tensors in memory, which the next step (or
 *   helper) writes to the store.
 * The end of backward waits for every read-ahead and prefetch in flight, so a step never reads a
 * shard under one. A store without `readSync`/`writeSync` (OPFS: its files open asynchronously),
 * or shards outside host memory (WebGPU), is a `FsdpConfigError` naming what to call instead:
 * `stepOffloaded` and `localOptimStateDict`, which read and write asynchronously (and set the
 * holders aside while they step).
 */

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

/**
 * [Note: prefetching shards from a store]
 * A unit with `ssdOffload` is prefetched as an in-memory one is: where FSDP prefetches the next unit
 * (`limitAllGathers`, the forward and backward orders), `gatherAhead` reads that unit's shard in
 * from the store, issues its all-gather and frees the shard once the gather completes, while the
 * current unit computes; its own forward (or pre-backward) then finds its parameters gathered. The
 * read is awaited before the gather is issued, inside the current unit's forward or pre-backward
 * hook, which the backward engine awaits: every rank issues its collectives in the same order, as
 * without a store. With `readAhead: true`, the shard of the unit after that one is also read in the
 * background (`NodeFileStore` reads through libuv's thread pool), so the prefetch finds it in
 * memory; that holds one more shard at a time. Every other use of the shards (release, the step, a
 * checkpoint) waits for a read or prefetch in flight first, so a late read never lands on a shard
 * stepped since. Values are the same bytes either way. Measured on 2 cores (packages/fsdp/README.md,
 * benchmark), the prefetch made the step faster (turning it off: 1.04-1.08x slower) and `readAhead`
 * did not (1.17x slower with a rank a thread, 0.86x with two ranks in one), so it is off by default.
 */
