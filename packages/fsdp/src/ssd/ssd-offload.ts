import { type Optimizer, Tensor } from '@webshard/tensor-core';
import { FsdpConfigError } from '../errors.js';
import type { FlatParameter } from '../flat-param.js';
import type { ShardStore, ShardStoreStats } from './shard-store.js';

let serial = 0;

/**
 * [Note: shards in a store]
 * With `ssdOffload`, a unit's FP32 shards (fairscale's `ssd_offload`) and their optimizer state
 * live in a `ShardStore` between uses, and hold no memory ([Note: shard stores]):
 * - forward and pre-backward: each shard is read in (`load`) just before its all-gather and freed
 *   (`release`) once the gather completed; the file is still current, so nothing is written. The
 *   first release writes it. Such a unit is never prefetched: its gather waits for its read.
 * - the step: `stepOffloaded(model, optimizer)` steps one flat parameter at a time: its shard and
 *   its optimizer state read in, the optimizer run with every other parameter's gradient set aside,
 *   then shard and state written back and freed. At most one unit's shard and state are in memory.
 * Gradients stay in memory (one shard each, like the in-memory FSDP). The optimizer's arithmetic
 * is unchanged, so training equals the in-memory FSDP bit for bit. Anything else that reads a
 * shard outside these (the optimizer's own `step`, the optimizer's state dict, the sharded
 * checkpoint) finds it freed and throws `FreedTensorError` naming it; `summonFullParams` (and so
 * the full state dict) reads the shards in and writes back what it changed. Keys are `ssd<serial>.<shard name>.rank<r>`, unique in a process.
 */
export class SsdShards {
  readonly store: ShardStore;
  private readonly keys = new Map<FlatParameter, string>();
  /** Shards whose file does not hold their current value (never written, or read and stepped). */
  private readonly dirty = new Set<FlatParameter>();

  constructor(store: ShardStore, rank: number, flats: readonly FlatParameter[]) {
    this.store = store;
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
    for (const [flat, key] of this.keys) {
      if (flat.shard.isFreed) continue;
      if (this.dirty.has(flat)) {
        await writeFrom(this.store, key, flat.shard);
        this.dirty.delete(flat);
      }
      flat.shard.free();
    }
  }

  /** Step `optimizer` on each flat parameter in turn, shard and state read in and written back. */
  async step(optimizer: Optimizer<object, object>): Promise<void> {
    for (const [flat, key] of this.keys) {
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
    }
  }
}

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
): Promise<void> {
  const host = new Float32Array(target.size);
  await store.read(key, new Uint8Array(host.buffer));
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
