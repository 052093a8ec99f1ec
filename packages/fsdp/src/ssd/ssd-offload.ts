import type { Optimizer } from '@webshard/tensor-core';
import { FsdpConfigError } from '../errors.js';
import type { ShardStoreStats } from './shard-store.js';
import type { SsdShards } from './ssd-shards.js';

/** What `stepOffloaded` needs of a model: its units' offloaded shards. */
export interface OffloadedModel {
  units(): { readonly ssdShards: SsdShards | null; readonly unitName: string }[];
}

/**
 * The optimizer step of a model wrapped with `ssdOffload` ([Note: shards in a store]), reading and
 * writing asynchronously: each flat parameter's shard and optimizer state read from the store,
 * stepped, written back and freed, so at most one unit's are in memory. With a store that reads and
 * writes synchronously (`NodeFileStore`) `optimizer.step()` does the same ([Note: the optimizer's
 * own step through a store]); this is for one that does not (`OpfsStore`), or shards on WebGPU.
 * `zeroGrad` as usual. A model without `ssdOffload` is a `FsdpConfigError`.
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
