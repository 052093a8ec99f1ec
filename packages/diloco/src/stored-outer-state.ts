import type { Tensor } from '@webshard/tensor-core';
import type { OuterOptimizer } from './outer-optimizer.js';
import type { OuterStateStore } from './outer-state-store.js';

/** Elements a pass reads or writes at a time: 4 MiB of f32. */
export const STORE_CHUNK = 1 << 20;

/*
 * [Note: the outer state in a store]
 * DiLoCo's global copy and outer momentum (8 bytes a parameter, 1 GB for GPT-2 124M) are read only
 * at an outer sync, yet a rank holding them in memory holds them through every inner step, beside
 * the parameters, AdamW's moments, the gradients and the activations. Given a store (`outerState`;
 * a browser tab's origin private file system), DiLoCo keeps them there instead and holds none of
 * them in memory: the pseudo-gradient is made parameter by parameter, a chunk of the global copy
 * read at a time, and the outer step is taken chunk by chunk (the global and momentum chunks read,
 * stepped with `OuterOptimizer.applySlice`, written back, the parameter set from its new global
 * values). Element by element it is the arithmetic of the in-memory step, so a member with a store
 * and one without compute the same bits from the same average: the global copy stays exact f32
 * and members agree bit for bit. What it saves is the memory between syncs and the sync's peak:
 * at a sync the in-memory layout holds the global copy, the momentum and the pseudo-gradient (12
 * bytes a parameter) at once, the stored one the pseudo-gradient and a chunk. What it costs: each
 * sync reads the global copy twice and the momentum once and writes both (5 x 4 bytes a parameter
 * through the store). Checkpoints and joins read the whole state (`readStateDict`), so they hold it
 * while they run. Not with streamed syncs, whose fragments keep their own copies.
 */

/** The global copy and outer momentum of a non-streamed DiLoCo, kept in a store. */
export class StoredOuterState {
  private hasMomentum = false;
  private readonly chunk: number;

  private constructor(
    private readonly store: OuterStateStore,
    private readonly params: readonly Tensor[],
    private readonly outer: OuterOptimizer,
  ) {
    this.chunk = store.chunkElements ?? STORE_CHUNK;
  }

  /** A stored state whose global copy is `global` (the parameters, flat), without momentum. */
  static async create(
    store: OuterStateStore,
    params: readonly Tensor[],
    outer: OuterOptimizer,
    global: Float32Array,
  ): Promise<StoredOuterState> {
    const state = new StoredOuterState(store, params, outer);
    await state.load(global, null);
    return state;
  }

  /** Where the state lives, in words. */
  get where(): string {
    return this.store.where;
  }

  /** (global - local) x weight, flat, read parameter by parameter. */
  async pseudoGradient(weight: number): Promise<Float32Array> {
    const delta = new Float32Array(this.params.reduce((sum, p) => sum + p.size, 0));
    let offset = 0;
    for (const param of this.params) {
      const local = (await param.read()) as Float32Array;
      for (let start = 0; start < local.length; start += this.chunk) {
        const length = Math.min(this.chunk, local.length - start);
        const global = await this.store.read('global', offset + start, length);
        for (let i = 0; i < length; i++) {
          delta[offset + start + i] = (global[i]! - local[start + i]!) * weight;
        }
      }
      offset += local.length;
    }
    return delta;
  }

  /** One outer step with `averaged`, chunk by chunk; the parameters are set to the new global. */
  async apply(averaged: Float32Array): Promise<void> {
    const globalWriter = await this.store.writer('global');
    const momentumWriter = this.outer.momentum === 0 ? null : await this.store.writer('momentum');
    let offset = 0;
    for (const param of this.params) {
      const next = new Float32Array(param.size);
      for (let start = 0; start < param.size; start += this.chunk) {
        const at = offset + start;
        const length = Math.min(this.chunk, param.size - start);
        const global = await this.store.read('global', at, length);
        const momentum = this.hasMomentum ? await this.store.read('momentum', at, length) : null;
        const grad = averaged.subarray(at, at + length);
        const stepped = this.outer.applySlice(global, grad, momentum);
        await globalWriter.write(at, global);
        if (stepped !== null) await momentumWriter?.write(at, stepped);
        next.set(global, start);
      }
      param.write(next);
      offset += param.size;
    }
    await globalWriter.close();
    await momentumWriter?.close();
    if (momentumWriter !== null) this.hasMomentum = true;
    this.outer.countStep();
  }

  /** The whole global copy and momentum (null before the first step with momentum), read. */
  async read(): Promise<{ global: Float32Array; momentumBuffer: Float32Array | null }> {
    const n = this.elements();
    const global = await this.store.read('global', 0, n);
    const momentumBuffer = this.hasMomentum ? await this.store.read('momentum', 0, n) : null;
    return { global, momentumBuffer };
  }

  /** `name`'s elements a chunk at a time. */
  async *chunks(name: 'global' | 'momentum'): AsyncGenerator<Float32Array> {
    const n = this.elements();
    for (let start = 0; start < n; start += this.chunk) {
      yield await this.store.read(name, start, Math.min(this.chunk, n - start));
    }
  }

  /** Replace the state with `global` and `momentum` (the parameters are set by the caller). */
  async load(global: Float32Array, momentum: Float32Array | null): Promise<void> {
    await this.writeWhole('global', global);
    if (momentum !== null) await this.writeWhole('momentum', momentum);
    this.hasMomentum = momentum !== null;
  }

  /** Round the momentum in place with `round` (read whole, rounded, written back). */
  async roundMomentum(round: (momentum: Float32Array) => void): Promise<void> {
    if (!this.hasMomentum) return;
    const momentum = await this.store.read('momentum', 0, this.elements());
    round(momentum);
    await this.writeWhole('momentum', momentum);
  }

  private elements(): number {
    return this.params.reduce((sum, p) => sum + p.size, 0);
  }

  private async writeWhole(name: 'global' | 'momentum', values: Float32Array): Promise<void> {
    const writer = await this.store.writer(name);
    for (let start = 0; start < values.length; start += this.chunk) {
      await writer.write(start, values.subarray(start, start + this.chunk));
    }
    await writer.close();
  }
}
