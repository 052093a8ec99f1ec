import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import {
  createCpuBackend,
  keep,
  type Optimizer,
  type OptimizerParamState,
  type OptimizerStateDict,
  Tensor,
} from '@webshard/tensor-core';
import { decodeSafetensors, encodeSafetensors } from '@webshard/tensor-core/io';
import { FsdpError } from '../errors.js';
import type { FullyShardedDataParallel } from '../fully-sharded.js';
import { buffersOf, flatParamsOf, type ShardedLayout, shardedLayout } from '../layout.js';
import { withShardsInMemory } from '../ssd/ssd-offload.js';
import { consolidateFlat } from '../state-dict.js';
import { type FaultHook, writeFileAtomic } from './atomic-write.js';

/** A directory that is not a whole checkpoint of this model; the model was not changed. */
export class CheckpointError extends FsdpError {
  readonly dir: string;
  readonly file: string | undefined;
  constructor(op: string, dir: string, detail: string, file?: string, cause?: unknown) {
    super(op, `${dir}${file ? ` (${file})` : ''}: ${detail}`, { code: 'E_FSDP_CHECKPOINT', cause });
    this.dir = dir;
    this.file = file;
  }
}

export const MANIFEST = 'manifest.json';
const FORMAT = 'webshard-fsdp-checkpoint';

/** One rank's file as the manifest records it. */
export interface ManifestFile {
  readonly rank: number;
  readonly file: string;
  readonly bytes: number;
  readonly sha256: string;
}

/**
 * [Note: sharded checkpoints]
 * A checkpoint is a directory: one safetensors file per rank (its flat shards under
 * `param/<key>`, its optimizer state under `optim/<key>/<name>`, rank 0's also the buffers under
 * `buffer/<name>`), and `manifest.json`, written last: the format, the world size, the layout
 * ([Note: the sharded layout]), the step, the caller's `extra`, the optimizer's numbers and groups,
 * each file's size and SHA-256, and the SHA-256 of the manifest itself (`manifestDigest`), so an
 * edited step count or layout is refused like a corrupted shard. Every file is written atomically (temporary file, fsync,
 * rename) under a name of its own save (`<save>-rank<r>-of-<n>.safetensors`), and the manifest
 * replaces the previous one only after every rank's file is in place; files of older saves are
 * removed after that. So a crash at any point leaves the previous manifest, naming files that are
 * all still there: the previous checkpoint loads. Loading checks the manifest against the model,
 * every file's presence, size and hash, and cuts every tensor for the current world size before it
 * writes anything.
 */
export interface Manifest {
  readonly format: typeof FORMAT;
  readonly version: 2;
  readonly worldSize: number;
  readonly step: number;
  readonly extra: unknown;
  readonly layout: ShardedLayout;
  readonly optimizer: {
    /** Per flat-parameter key, the state's numbers (`step`). */
    readonly numbers: Record<string, Record<string, number | null>>;
    readonly paramGroups: (Record<string, unknown> & { params: string[] })[];
  } | null;
  readonly files: readonly ManifestFile[];
  /** SHA-256 of the manifest's own JSON without this field (`manifestDigest`). */
  readonly sha256: string;
}

/** The SHA-256 a manifest carries: of its JSON (compact) without its own `sha256` field. */
export function manifestDigest(manifest: Omit<Manifest, 'sha256'> & { sha256?: string }): string {
  const { sha256: _, ...body } = manifest;
  return sha256(new TextEncoder().encode(JSON.stringify(body)));
}

type AnyOptimizer = Optimizer<object, object>;

/** What `saveShardedCheckpoint` saves. */
export interface SaveCheckpointOptions {
  readonly model: FullyShardedDataParallel;
  readonly optimizer?: AnyOptimizer;
  readonly step?: number;
  /** JSON-serializable data kept in the manifest (a data loader's position, a schedule). */
  readonly extra?: unknown;
  /** Tests: simulate a crash at a stage of a file's write. */
  readonly fault?: FaultHook;
}

function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

function optimizerKeys(root: FullyShardedDataParallel, optimizer: AnyOptimizer): string[] {
  const flats = flatParamsOf(root);
  return optimizer.params.map((p) => {
    const f = flats.find((x) => x.flat.shard === p);
    if (f === undefined) {
      throw new CheckpointError(
        'saveShardedCheckpoint',
        '-',
        `the optimizer steps ${p.name ?? String(p)}, which is not a shard of this model`,
      );
    }
    return f.key;
  });
}

/**
 * Save the model's shards, the optimizer's state and `step` / `extra` as a sharded checkpoint in
 * `dir` (see [Note: sharded checkpoints]). Every rank calls it (with `HYBRID_SHARD`, node 0's
 * ranks write one replica); it resolves once the manifest is in
 * place on every rank's view.
 */
export async function saveShardedCheckpoint(
  dir: string,
  options: SaveCheckpointOptions,
): Promise<void> {
  const { model } = options;
  for (const unit of model.units()) unit.assertState('saveShardedCheckpoint', ['IDLE']);
  // Replicas hold the same shards: node 0's ranks write the checkpoint, the others wait for it
  // ([Note: hybrid sharding]).
  const replicas = model.options.replicateGroup;
  if (replicas !== null && replicas.rank !== 0) {
    await replicas.barrier().wait();
    return;
  }
  await withShardsInMemory(
    model,
    options.optimizer as Optimizer<object, object> | undefined,
    async () => {
      await saveReplica(dir, options);
      return { value: undefined, changed: false };
    },
  );
  if (replicas !== null) await replicas.barrier().wait();
}

/** `saveShardedCheckpoint` on the ranks of one replica (all ranks without hybrid sharding). */
async function saveReplica(dir: string, options: SaveCheckpointOptions): Promise<void> {
  const { model, optimizer } = options;
  const group = model.options.group;
  const layout = shardedLayout(model);
  const tensors: Record<string, Tensor> = {};
  for (const { key, flat } of flatParamsOf(model)) tensors[`param/${key}`] = flat.shard;
  let optimizerPart: Manifest['optimizer'] = null;
  if (optimizer !== undefined) {
    const keys = optimizerKeys(model, optimizer);
    const dict = optimizer.stateDict();
    const numbers: Record<string, Record<string, number | null>> = {};
    for (const [index, state] of Object.entries(dict.state)) {
      const key = keys[Number(index)]!;
      numbers[key] = {};
      for (const [name, value] of Object.entries(state)) {
        if (value instanceof Tensor) tensors[`optim/${key}/${name}`] = value;
        else numbers[key]![name] = value;
      }
    }
    optimizerPart = {
      numbers,
      paramGroups: dict.param_groups.map((g) => ({ ...g, params: g.params.map((i) => keys[i]!) })),
    };
  }
  if (group.rank === 0) {
    for (const [name, b] of buffersOf(model, layout)) tensors[`buffer/${name}`] = b;
  }
  await mkdir(dir, { recursive: true });
  // One save id for all ranks: rank 0 draws it, the others receive it.
  const id = new Int32Array(2);
  if (group.rank === 0) {
    id[0] = Math.floor(Date.now() / 1000) | 0;
    id[1] = (Math.random() * 2 ** 31) | 0;
  }
  await group.broadcast(id, 0).wait();
  const save = `${(id[0]! >>> 0).toString(36)}${(id[1]! >>> 0).toString(36)}`;
  const file = `${save}-rank${group.rank}-of-${group.size}.safetensors`;
  const bytes = await encodeSafetensors(tensors);
  await writeFileAtomic(join(dir, file), bytes, options.fault);
  // Every rank's size and hash to every rank (rank 0 writes the manifest).
  const digest = Buffer.from(sha256(bytes), 'hex');
  const mine = new Int32Array(10);
  mine.set(new Int32Array(digest.buffer, digest.byteOffset, 8));
  mine[8] = bytes.byteLength % 2 ** 31;
  mine[9] = Math.floor(bytes.byteLength / 2 ** 31);
  const all = new Int32Array(10 * group.size);
  await group.allGather(mine, all).wait();
  if (group.rank === 0) {
    const files: ManifestFile[] = [];
    for (let r = 0; r < group.size; r++) {
      const part = all.subarray(10 * r, 10 * r + 10);
      files.push({
        rank: r,
        file: `${save}-rank${r}-of-${group.size}.safetensors`,
        bytes: part[8]! + part[9]! * 2 ** 31,
        sha256: Buffer.from(new Uint8Array(part.buffer, part.byteOffset, 32)).toString('hex'),
      });
    }
    const body: Omit<Manifest, 'sha256'> = {
      format: FORMAT,
      version: 2,
      worldSize: group.size,
      step: options.step ?? 0,
      extra: options.extra ?? null,
      layout,
      optimizer: optimizerPart,
      files,
    };
    const manifest: Manifest = { ...body, sha256: manifestDigest(body) };
    const text = new TextEncoder().encode(`${JSON.stringify(manifest, null, 1)}\n`);
    await writeFileAtomic(join(dir, MANIFEST), text, options.fault);
    // Older saves' files are no longer named by the manifest.
    const keep = new Set(files.map((f) => f.file));
    for (const name of await readdir(dir)) {
      if (
        name.endsWith('.safetensors') &&
        /-rank\d+-of-\d+\.safetensors$/.test(name) &&
        !keep.has(name)
      ) {
        await rm(join(dir, name), { force: true });
      }
    }
  }
  await group.barrier().wait();
}

/** Read and check a checkpoint's manifest and files (no model needed): the decoded files by rank. */
export async function readCheckpoint(
  dir: string,
  op = 'loadShardedCheckpoint',
): Promise<{ manifest: Manifest; files: Record<string, Tensor>[] }> {
  let text: string;
  try {
    const info = await stat(dir);
    if (!info.isDirectory()) throw new CheckpointError(op, dir, 'is not a directory');
    text = await readFile(join(dir, MANIFEST), 'utf8');
  } catch (error) {
    if (error instanceof CheckpointError) throw error;
    throw new CheckpointError(
      op,
      dir,
      `is not a checkpoint: no readable ${MANIFEST}`,
      undefined,
      error,
    );
  }
  let manifest: Manifest;
  try {
    manifest = JSON.parse(text) as Manifest;
  } catch (error) {
    throw new CheckpointError(op, dir, `${MANIFEST} is not valid JSON`, MANIFEST, error);
  }
  if (manifest?.format !== FORMAT || manifest.version !== 2 || !Array.isArray(manifest.files)) {
    throw new CheckpointError(
      op,
      dir,
      `${MANIFEST} is not a ${FORMAT} manifest of version 2`,
      MANIFEST,
    );
  }
  if (manifest.sha256 !== manifestDigest(manifest)) {
    throw new CheckpointError(
      op,
      dir,
      'its SHA-256 differs from the one it records (edited or corrupted)',
      MANIFEST,
    );
  }
  if (manifest.files.length !== manifest.worldSize) {
    throw new CheckpointError(
      op,
      dir,
      `the manifest lists ${manifest.files.length} files for a world of ${manifest.worldSize}`,
      MANIFEST,
    );
  }
  const backend = createCpuBackend();
  const files: Record<string, Tensor>[] = [];
  for (const [r, entry] of manifest.files.entries()) {
    if (entry.rank !== r)
      throw new CheckpointError(op, dir, `file ${r} is for rank ${entry.rank}`, MANIFEST);
    let bytes: Uint8Array;
    try {
      bytes = await readFile(join(dir, entry.file));
    } catch (error) {
      throw new CheckpointError(
        op,
        dir,
        `the file of rank ${r} of ${manifest.worldSize} is missing`,
        entry.file,
        error,
      );
    }
    if (bytes.byteLength !== entry.bytes) {
      throw new CheckpointError(
        op,
        dir,
        `has ${bytes.byteLength} bytes, the manifest says ${entry.bytes} (truncated?)`,
        entry.file,
      );
    }
    if (sha256(bytes) !== entry.sha256) {
      throw new CheckpointError(
        op,
        dir,
        'its SHA-256 differs from the manifest (corrupted)',
        entry.file,
      );
    }
    try {
      files.push(decodeSafetensors(bytes, { backend }).tensors);
    } catch (error) {
      throw new CheckpointError(op, dir, 'is not a valid safetensors file', entry.file, error);
    }
  }
  return { manifest, files };
}

function sameLayout(a: ShardedLayout, b: ShardedLayout): string | null {
  if (a.flatParams.length !== b.flatParams.length) {
    return `${a.flatParams.length} flat parameters in the checkpoint, ${b.flatParams.length} in the model`;
  }
  for (const [i, fa] of a.flatParams.entries()) {
    const fb = b.flatParams[i]!;
    if (fa.key !== fb.key || fa.numel !== fb.numel || fa.entries.length !== fb.entries.length) {
      return `flat parameter ${fa.key} (${fa.numel} elements) does not match ${fb.key} (${fb.numel})`;
    }
    for (const [j, ea] of fa.entries.entries()) {
      const eb = fb.entries[j]!;
      if (
        ea.names[0] !== eb.names[0] ||
        ea.offset !== eb.offset ||
        ea.shape.join() !== eb.shape.join()
      ) {
        return `${ea.names[0]} [${ea.shape.join(', ')}] does not match ${eb.names[0]} [${eb.shape.join(', ')}]`;
      }
    }
  }
  if (a.buffers.join() !== b.buffers.join()) return 'the buffers differ';
  return null;
}

/** This rank's slice of a flat tensor stored as one shard per rank of the checkpoint. */
async function reshard(
  files: Record<string, Tensor>[],
  manifest: Manifest,
  name: string,
  key: string,
  rank: number,
  shardNumel: number,
): Promise<Float32Array> {
  const shards = await Promise.all(files.map(async (f) => (await f[name]!.read()) as Float32Array));
  const full = consolidateFlat(manifest.layout, key, shards);
  const out = new Float32Array(shardNumel);
  out.set(full.subarray(rank * shardNumel, Math.min(full.length, (rank + 1) * shardNumel)));
  return out;
}

/**
 * Load a sharded checkpoint saved at any world size into the model (and optimizer) of this one.
 * Everything is read and checked first; a `CheckpointError` leaves the model and optimizer as they
 * were. Resolves to the saved step and extra.
 */
export async function loadShardedCheckpoint(
  dir: string,
  options: { model: FullyShardedDataParallel; optimizer?: AnyOptimizer },
): Promise<{ step: number; extra: unknown }> {
  // With ssdOffload the shards and state are read in, and written back once replaced ([Note:
  // sharded checkpoints of shards in a store]).
  return withShardsInMemory(
    options.model,
    options.optimizer as Optimizer<object, object> | undefined,
    () => loadInMemory(dir, options),
  );
}

async function loadInMemory(
  dir: string,
  options: { model: FullyShardedDataParallel; optimizer?: AnyOptimizer },
): Promise<{ value: { step: number; extra: unknown }; changed: boolean }> {
  const op = 'loadShardedCheckpoint';
  const { model, optimizer } = options;
  for (const unit of model.units()) unit.assertState(op, ['IDLE']);
  const { manifest, files } = await readCheckpoint(dir, op);
  const layout = shardedLayout(model);
  const mismatch = sameLayout(manifest.layout, layout);
  if (mismatch !== null)
    throw new CheckpointError(op, dir, `a checkpoint of another model: ${mismatch}`, MANIFEST);
  const rank = model.options.group.rank;
  const flats = flatParamsOf(model);
  for (const [r, f] of files.entries()) {
    for (const { key } of flats) {
      if (!(`param/${key}` in f))
        throw new CheckpointError(op, dir, `has no shard ${key}`, manifest.files[r]!.file);
    }
  }
  const shards = await Promise.all(
    flats.map(({ key, flat }) =>
      reshard(files, manifest, `param/${key}`, key, rank, flat.shardNumel),
    ),
  );
  let optimizerDict: OptimizerStateDict | null = null;
  if (optimizer !== undefined) {
    if (manifest.optimizer === null)
      throw new CheckpointError(op, dir, 'has no optimizer state', MANIFEST);
    const keys = optimizerKeys(model, optimizer);
    const own = optimizer.stateDict();
    if (own.param_groups.length !== manifest.optimizer.paramGroups.length) {
      throw new CheckpointError(
        op,
        dir,
        'the optimizer has another number of parameter groups',
        MANIFEST,
      );
    }
    const backend = createCpuBackend();
    const state: OptimizerStateDict['state'] = {};
    for (const [i, key] of keys.entries()) {
      const numbers = manifest.optimizer.numbers[key];
      if (numbers === undefined) continue;
      const flat = flats.find((f) => f.key === key)!.flat;
      const entry: OptimizerParamState = { ...numbers };
      const prefix = `optim/${key}/`;
      for (const name of Object.keys(files[0]!).filter((n) => n.startsWith(prefix))) {
        const values = await reshard(files, manifest, name, key, rank, flat.shardNumel);
        const t = keep(Tensor.empty(backend, [flat.shardNumel], 'f32'));
        t.write(values);
        entry[name.slice(prefix.length)] = t;
      }
      state[i] = entry;
    }
    optimizerDict = {
      state,
      param_groups: own.param_groups.map((g, i) => ({
        ...manifest.optimizer!.paramGroups[i]!,
        params: g.params,
      })),
    };
  }
  const buffers = buffersOf(model, layout);
  for (const name of buffers.keys()) {
    if (!(`buffer/${name}` in files[0]!))
      throw new CheckpointError(op, dir, `has no buffer ${name}`, manifest.files[0]!.file);
  }
  // Everything is read and checked: write.
  flats.forEach(({ flat }, i) => {
    flat.shard.write(shards[i]!);
  });
  for (const [name, b] of buffers) b.write(await files[0]![`buffer/${name}`]!.read());
  if (optimizer !== undefined && optimizerDict !== null) {
    await optimizer.loadStateDict(optimizerDict);
    for (const s of Object.values(optimizerDict.state)) {
      for (const v of Object.values(s)) if (v instanceof Tensor) v.free();
    }
  }
  for (const f of files) for (const t of Object.values(f)) t.free();
  return { value: { step: manifest.step, extra: manifest.extra }, changed: true };
}
