import {
  type Backend,
  createCpuBackend,
  isFloatDType,
  keep,
  type StateDictInput,
  Tensor,
} from '@webshard/tensor-core';
import { FsdpError } from './errors.js';
import type { FullyShardedDataParallel } from './fully-sharded.js';
import { cleanPath } from './module-tree.js';
import {
  buffersOf,
  type FlatParamLayout,
  flatParamsOf,
  type ShardedLayout,
  shardedLayout,
} from './layout.js';

/** A full state dict, a local one or a checkpoint that does not fit the model. Nothing was changed. */
export class FsdpStateDictError extends FsdpError {
  readonly missingKeys: readonly string[];
  readonly unexpectedKeys: readonly string[];
  readonly shapeMismatches: readonly string[];
  constructor(
    op: string,
    detail: string,
    lists: { missing?: string[]; unexpected?: string[]; shapes?: string[] } = {},
  ) {
    const parts = [detail];
    if (lists.missing?.length) parts.push(`missing keys: ${lists.missing.join(', ')}`);
    if (lists.unexpected?.length) parts.push(`unexpected keys: ${lists.unexpected.join(', ')}`);
    if (lists.shapes?.length) parts.push(...lists.shapes);
    super(op, parts.join('; '), { code: 'E_FSDP_STATE_DICT' });
    this.missingKeys = lists.missing ?? [];
    this.unexpectedKeys = lists.unexpected ?? [];
    this.shapeMismatches = lists.shapes ?? [];
  }
}

/** Options of `fullStateDict`. */
export interface FullStateDictOptions {
  /** Only rank 0 gets the tensors (the others return an empty map). Default false. */
  rank0Only?: boolean;
  /** Where the returned tensors live. Default: a CPU backend of their own. */
  backend?: Backend;
}

/** Gather one flat parameter's full f32 values (every rank takes part). */
async function gatherFlat(
  root: FullyShardedDataParallel,
  shard: Tensor,
  padded: number,
): Promise<Float32Array> {
  const full = keep(Tensor.empty(shard.backend, [padded], 'f32'));
  try {
    await root.options.group.allGather(shard, full).wait();
    return (await full.read()) as Float32Array;
  } finally {
    full.free();
  }
}

/**
 * The consolidated f32 parameters and the buffers (floating ones in f32, also under mixed
 * precision) of a wrapped model under their names in the
 * unwrapped model (fairscale's full `state_dict()`), a tied parameter once under its first name
 * (`transformer.wte.weight`, not `lm_head.weight`). Streamed one flat parameter at a time, so the
 * memory it adds to training is one flat parameter's full values plus the result. Every rank must
 * call it; with `rank0Only` the others get an empty map.
 */
export async function fullStateDict(
  root: FullyShardedDataParallel,
  options: FullStateDictOptions = {},
): Promise<Map<string, Tensor>> {
  for (const unit of root.units()) unit.assertState('fullStateDict', ['IDLE']);
  const layout = shardedLayout(root);
  // With replicas ([Note: hybrid sharding]), rank 0 of node 0 is the world's rank 0.
  const first = root.options.group.rank === 0 && (root.options.replicateGroup?.rank ?? 0) === 0;
  const holds = !(options.rank0Only ?? false) || first;
  const backend = options.backend ?? createCpuBackend();
  const byName = new Map<string, Tensor>();
  const flats = flatParamsOf(root);
  for (const [i, fl] of layout.flatParams.entries()) {
    const values = await gatherFlat(root, flats[i]!.flat.shard, fl.paddedNumel);
    if (!holds) continue;
    for (const e of fl.entries) {
      const t = keep(Tensor.empty(backend, e.shape, 'f32'));
      t.write(values.subarray(e.offset, e.offset + e.numel));
      t.name = e.names[0];
      byName.set(e.names[0]!, t);
    }
  }
  if (holds) {
    for (const [name, b] of buffersOf(root, layout)) {
      let t = keep(Tensor.empty(backend, b.shape, b.dtype));
      backend.write(t.kernel('fullStateDict'), await b.readRaw());
      // Mixed precision keeps floating buffers in `bufferDtype`; the state dict is full precision
      // (fairscale casts them to f32 around `state_dict()`).
      if (root.options.mixedPrecision && isFloatDType(b.dtype) && b.dtype !== 'f32') {
        const f32 = keep(Tensor.empty(backend, b.shape, 'f32'));
        backend.cast(t.kernel('fullStateDict'), f32.kernel('fullStateDict'));
        t.free();
        t = f32;
      }
      t.name = name;
      byName.set(name, t);
    }
  }
  // The wrapped module's order: parameters and buffers as its stateDict lists them.
  const ordered = new Map<string, Tensor>();
  for (const [key] of root.module.stateDict()) {
    const name = cleanPath(key);
    const t = byName.get(name);
    if (t !== undefined) ordered.set(name, t);
  }
  return ordered;
}

function entriesOf(dict: StateDictInput): Map<string, Tensor> {
  return dict instanceof Map
    ? new Map(dict)
    : new Map(Object.entries(dict as Readonly<Record<string, Tensor>>));
}

/**
 * Check `dict` against the layout: every parameter under one of its names, every buffer, nothing
 * else, every shape. Returns the tensor for each flat parameter's entries. Throws
 * `FsdpStateDictError` listing every problem, before anything is written.
 */
function matchFullDict(
  op: string,
  layout: ShardedLayout,
  dict: Map<string, Tensor>,
): { params: Tensor[][]; buffers: Map<string, Tensor> } {
  const missing: string[] = [];
  const shapes: string[] = [];
  const used = new Set<string>();
  const params = layout.flatParams.map((fl) =>
    fl.entries.map((e) => {
      const name = e.names.find((n) => dict.has(n));
      if (name === undefined) {
        missing.push(e.names[0]!);
        return null as unknown as Tensor;
      }
      for (const n of e.names) used.add(n);
      const t = dict.get(name)!;
      if (t.isFreed) {
        shapes.push(`tensor for ${name} was freed`);
      } else if (
        t.size !== e.numel ||
        t.shape.length !== e.shape.length ||
        t.shape.some((d, i) => d !== e.shape[i])
      ) {
        shapes.push(
          `shape mismatch for ${name}: checkpoint [${t.shape.join(', ')}], model [${e.shape.join(', ')}]`,
        );
      }
      return t;
    }),
  );
  const buffers = new Map<string, Tensor>();
  for (const name of layout.buffers) {
    const t = dict.get(name);
    if (t === undefined) missing.push(name);
    else {
      used.add(name);
      buffers.set(name, t);
    }
  }
  const unexpected = [...dict.keys()].filter((k) => !used.has(k));
  if (missing.length || unexpected.length || shapes.length) {
    throw new FsdpStateDictError(op, 'the state dict does not fit the model', {
      missing,
      unexpected,
      shapes,
    });
  }
  return { params, buffers };
}

/**
 * Load a full state dict (from `fullStateDict` at any world size, or the unwrapped model's
 * `stateDict()`) into a wrapped model: each rank keeps its shard of every flat parameter. Every key,
 * shape and tensor is checked before any shard is written; on a mismatch `FsdpStateDictError`
 * lists every problem and the model is unchanged. Needs no collective: every rank passes the full
 * dict.
 */
export async function loadFullStateDict(
  root: FullyShardedDataParallel,
  dict: StateDictInput,
): Promise<void> {
  const op = 'loadFullStateDict';
  for (const unit of root.units()) unit.assertState(op, ['IDLE']);
  const layout = shardedLayout(root);
  const { params, buffers } = matchFullDict(op, layout, entriesOf(dict));
  const values: Float32Array[] = [];
  for (const [i, fl] of layout.flatParams.entries()) {
    const full = new Float32Array(fl.paddedNumel);
    for (const [j, e] of fl.entries.entries()) {
      full.set((await params[i]![j]!.read()) as Float32Array, e.offset);
    }
    values.push(full);
  }
  const flats = flatParamsOf(root);
  const rank = root.options.group.rank;
  flats.forEach(({ flat }, i) => {
    flat.shard.write(values[i]!.subarray(rank * flat.shardNumel, (rank + 1) * flat.shardNumel));
  });
  const own = buffersOf(root, layout);
  for (const [name, source] of buffers) {
    const target = own.get(name)!;
    const data = await source.read();
    target.write(data);
  }
}

/** One rank's shards with what rebuilds full tensors from them (fairscale's `local_state_dict`). */
export interface LocalStateDict {
  readonly rank: number;
  readonly layout: ShardedLayout;
  /** Each flat parameter's shard by its key (the model's own tensors: do not free). */
  readonly shards: Map<string, Tensor>;
  /** The buffers by name (the model's own tensors). */
  readonly buffers: Map<string, Tensor>;
}

/** This rank's shards and the layout; no collective. */
export function localStateDict(root: FullyShardedDataParallel): LocalStateDict {
  const layout = shardedLayout(root);
  const shards = new Map<string, Tensor>();
  for (const { key, flat } of flatParamsOf(root)) shards.set(key, flat.shard);
  return { rank: root.options.group.rank, layout, shards, buffers: buffersOf(root, layout) };
}

/** Describe how the layout `given` differs from the model's `own`, one line per difference. */
function layoutDifferences(own: ShardedLayout, given: ShardedLayout): string[] {
  const out: string[] = [];
  if (own.worldSize !== given.worldSize) {
    out.push(`world size ${given.worldSize}, the model's ${own.worldSize}`);
  }
  const keys = (l: ShardedLayout) => l.flatParams.map((f) => f.key).join(', ');
  if (keys(own) !== keys(given)) {
    out.push(`flat parameters [${keys(given)}], the model's [${keys(own)}]`);
    return out;
  }
  for (const [i, fl] of own.flatParams.entries()) {
    const g = given.flatParams[i]!;
    const entries = (f: FlatParamLayout) =>
      f.entries.map((e) => `${e.names[0]}[${e.shape.join(',')}]@${e.offset}`).join(' ');
    if (g.numel !== fl.numel || entries(g) !== entries(fl)) {
      out.push(`${fl.key} holds ${entries(g)}, the model's ${entries(fl)}`);
    }
  }
  const buffers = (l: ShardedLayout) => [...l.buffers].sort().join(', ');
  if (buffers(own) !== buffers(given)) {
    out.push(`buffers [${buffers(given)}], the model's [${buffers(own)}]`);
  }
  return out;
}

/**
 * Load this rank's local state dict (from `localStateDict` of a model wrapped the same way at the
 * same world size, on the same rank) into a wrapped model, in memory (fairscale's
 * `load_local_state_dict`): each shard and buffer is copied in. The rank, the layout and every
 * shard's size are checked first; a mismatch is a `FsdpStateDictError` listing every problem and
 * nothing is written. No collective. To change world size, go through `fullStateDict` or a sharded
 * checkpoint.
 */
export async function loadLocalStateDict(
  root: FullyShardedDataParallel,
  local: LocalStateDict,
): Promise<void> {
  const op = 'loadLocalStateDict';
  for (const unit of root.units()) unit.assertState(op, ['IDLE']);
  const rank = root.options.group.rank;
  const layout = shardedLayout(root);
  const problems = layoutDifferences(layout, local.layout);
  if (local.rank !== rank) problems.unshift(`it is rank ${local.rank}'s, this is rank ${rank}`);
  const flats = flatParamsOf(root);
  const sources = flats.map(({ key, flat }) => {
    const t = local.shards.get(key);
    if (t === undefined) problems.push(`no shard ${key}`);
    else if (t.isFreed) problems.push(`shard ${key} was freed`);
    else if (t.size !== flat.shardNumel) {
      problems.push(`shard ${key} has ${t.size} elements, the model's ${flat.shardNumel}`);
    }
    return t;
  });
  const own = buffersOf(root, layout);
  for (const [name, b] of own) {
    const t = local.buffers.get(name);
    if (t === undefined) problems.push(`no buffer ${name}`);
    else if (t.size !== b.size)
      problems.push(`buffer ${name} has ${t.size} elements, the model's ${b.size}`);
  }
  if (problems.length > 0) {
    throw new FsdpStateDictError(
      op,
      `the local state dict does not fit rank ${rank}: ${problems.join('; ')}`,
    );
  }
  const values = await Promise.all(sources.map((t) => t!.read()));
  const bufferValues = await Promise.all(
    [...own.keys()].map((name) => local.buffers.get(name)!.read()),
  );
  flats.forEach(({ flat }, i) => {
    flat.shard.write(values[i]!);
  });
  [...own.values()].forEach((b, i) => {
    b.write(bufferValues[i]!);
  });
}

/** The full values of every flat parameter, from one shard array per rank (in rank order). */
export function consolidateFlat(
  layout: ShardedLayout,
  key: string,
  shards: readonly Float32Array[],
): Float32Array {
  const fl = layout.flatParams.find((f) => f.key === key)!;
  const per = fl.paddedNumel / layout.worldSize;
  const full = new Float32Array(fl.paddedNumel);
  shards.forEach((s, r) => {
    if (s.length !== per) {
      throw new FsdpStateDictError(
        'consolidateShardWeights',
        `shard ${key} of rank ${r} has ${s.length} elements, the layout says ${per}`,
      );
    }
    full.set(s, r * per);
  });
  return full;
}

/**
 * Rebuild the full state dict offline, without a process group, from every rank's local state dict
 * (fairscale's `consolidate_shard_weights`). Tensors are f32 on `backend` (a new CPU backend by
 * default), a tied parameter once under its first name.
 */
export async function consolidateShardWeights(
  locals: readonly LocalStateDict[],
  backend: Backend = createCpuBackend(),
): Promise<Map<string, Tensor>> {
  const op = 'consolidateShardWeights';
  if (locals.length === 0) throw new FsdpStateDictError(op, 'no local state dicts given');
  const layout = locals[0]!.layout;
  const ranks = [...locals].sort((a, b) => a.rank - b.rank);
  if (ranks.length !== layout.worldSize || ranks.some((l, r) => l.rank !== r)) {
    throw new FsdpStateDictError(
      op,
      `expected the local state dicts of ranks 0..${layout.worldSize - 1}, got ranks ${ranks.map((l) => l.rank).join(', ')}`,
    );
  }
  const out = new Map<string, Tensor>();
  for (const fl of layout.flatParams) {
    const shards = await Promise.all(
      ranks.map(async (l) => {
        const t = l.shards.get(fl.key);
        if (t === undefined) {
          throw new FsdpStateDictError(op, `rank ${l.rank} has no shard ${fl.key}`);
        }
        return (await t.read()) as Float32Array;
      }),
    );
    const full = consolidateFlat(layout, fl.key, shards);
    for (const e of fl.entries) {
      const t = keep(Tensor.empty(backend, e.shape, 'f32'));
      t.write(full.subarray(e.offset, e.offset + e.numel));
      t.name = e.names[0];
      out.set(e.names[0]!, t);
    }
  }
  for (const [name, b] of ranks[0]!.buffers) {
    const t = keep(Tensor.empty(backend, b.shape, b.dtype));
    backend.write(t.kernel(op), await b.readRaw());
    out.set(name, t);
  }
  return out;
}
