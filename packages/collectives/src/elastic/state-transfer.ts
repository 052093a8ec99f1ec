import { ArgumentError } from '@webshard/tensor-core';
import type { ProcessGroup } from '../process-group.js';
import { stateDigest } from './state-digest.js';

/** One named piece of state: parameters, optimizer moments, a step counter, opaque bytes. */
export type StateValue = Float32Array | Int32Array | Uint16Array | Uint8Array;

/** Named state, in the order it is sent. */
export type StateEntries = ReadonlyMap<string, StateValue>;

const KINDS = ['f32', 'i32', 'u16', 'u8'] as const;
type Kind = (typeof KINDS)[number];

interface ManifestEntry {
  readonly name: string;
  readonly kind: Kind;
  readonly length: number;
}

function kindOf(value: StateValue): Kind {
  if (value instanceof Float32Array) return 'f32';
  if (value instanceof Int32Array) return 'i32';
  if (value instanceof Uint16Array) return 'u16';
  return 'u8';
}

function allocate(kind: Kind, length: number): StateValue {
  if (kind === 'f32') return new Float32Array(length);
  if (kind === 'i32') return new Int32Array(length);
  if (kind === 'u16') return new Uint16Array(length);
  return new Uint8Array(length);
}

/**
 * The bytes of `value` as i32 elements for the broadcast (bit for bit: i32 is moved, never
 * converted). A view when the bytes are 4-aligned, else a padded copy (`back` copies it home).
 */
function wordsOf(value: StateValue): { words: Int32Array; back: () => void } {
  const { buffer, byteOffset, byteLength } = value;
  if (byteOffset % 4 === 0 && byteLength % 4 === 0) {
    return { words: new Int32Array(buffer, byteOffset, byteLength / 4), back: () => {} };
  }
  const words = new Int32Array(Math.ceil(byteLength / 4));
  const bytes = new Uint8Array(buffer, byteOffset, byteLength);
  new Uint8Array(words.buffer).set(bytes);
  return {
    words,
    back: () => bytes.set(new Uint8Array(words.buffer, 0, byteLength)),
  };
}

/**
 * Copies the state of rank `root` (default 0) to every rank of `group`, bit for bit: parameters,
 * optimizer state and anything else as opaque typed arrays. `root` passes its entries; the others
 * pass `undefined` or entries to overwrite in place (names, types and lengths must then match
 * `root`'s, else an `ArgumentError` naming the entry). Returns the state every rank now holds.
 *
 * [Note: elastic state transfer]
 * Root first broadcasts a manifest (each entry's name, element type and length, as JSON) and then
 * each entry as i32 words. A newcomer thus needs nothing but the group: it receives the current
 * global state from a live member, not from a checkpoint. After a change of membership everyone,
 * survivors included, takes rank 0's copy (the oldest survivor's, [Note: elastic rank order]): a
 * step that failed half-way on some ranks cannot leave the world with two versions of the model.
 */
export async function broadcastState(
  group: ProcessGroup,
  entries: StateEntries | undefined,
  root = 0,
): Promise<Map<string, StateValue>> {
  return (await transferState(group, entries, root, false)).state;
}

/**
 * `broadcastState`, except that an entry every rank already holds bit for bit is not sent: each
 * rank that passes its own entries compares their digests with root's ([Note: a state digest]),
 * and only the entries some rank lacks are broadcast. For members that start from one seed (a
 * job's first epoch), where the copy would move the whole model to find it the same: GPT-2's
 * global copy took 200 s to broadcast over a 20 Mbit/s uplink, its digest about a second. A rank
 * that passes `undefined`, or no entry of a name, is sent that entry. `skipped`: the entries no
 * rank was sent (the same list on every rank).
 */
export async function broadcastStateWhereDifferent(
  group: ProcessGroup,
  entries: StateEntries | undefined,
  root = 0,
): Promise<{ state: Map<string, StateValue>; skipped: string[] }> {
  return transferState(group, entries, root, true);
}

async function transferState(
  group: ProcessGroup,
  entries: StateEntries | undefined,
  root: number,
  compare: boolean,
): Promise<{ state: Map<string, StateValue>; skipped: string[] }> {
  const isRoot = group.rank === root;
  if (isRoot && entries === undefined) {
    throw new ArgumentError('broadcastState', `rank ${root} is the root and must pass its state`);
  }
  const manifestLength = new Int32Array(1);
  let manifestBytes = new Uint8Array(0);
  if (isRoot) {
    const manifest: ManifestEntry[] = [...entries!].map(([name, value]) => ({
      name,
      kind: kindOf(value),
      length: value.length,
    }));
    manifestBytes = new TextEncoder().encode(JSON.stringify(manifest));
    manifestLength[0] = manifestBytes.byteLength;
  }
  await group.broadcast(manifestLength, root).wait();
  const manifestWords = new Int32Array(Math.ceil(manifestLength[0]! / 4));
  if (isRoot) new Uint8Array(manifestWords.buffer).set(manifestBytes);
  await group.broadcast(manifestWords, root).wait();
  const manifest = JSON.parse(
    new TextDecoder().decode(new Uint8Array(manifestWords.buffer, 0, manifestLength[0]!)),
  ) as ManifestEntry[];
  // Every entry is checked before any moves; a mismatch aborts the group, so root fails too.
  const held = manifest.map(({ name }) => (isRoot ? true : entries?.get(name) !== undefined));
  const targets = manifest.map(({ name, kind, length }) => {
    const given = isRoot ? entries!.get(name)! : entries?.get(name);
    if (given === undefined) return allocate(kind, length);
    if (kindOf(given) !== kind || given.length !== length) {
      const message = `rank ${group.rank}: entry '${name}' is ${kindOf(given)}[${given.length}] here, ${kind}[${length}] on rank ${root}`;
      group.abort(`[broadcastState] ${message}`);
      throw new ArgumentError('broadcastState', message);
    }
    return given;
  });
  const send = compare ? await entriesToSend(group, root, targets, held) : targets.map(() => true);
  const state = new Map<string, StateValue>();
  const skipped: string[] = [];
  for (const [index, { name }] of manifest.entries()) {
    const target = targets[index]!;
    if (send[index]) {
      const { words, back } = wordsOf(target);
      if (words.length > 0) await group.broadcast(words, root).wait();
      back();
    } else {
      skipped.push(name);
    }
    state.set(name, target);
  }
  return { state, skipped };
}

/**
 * Which entries some rank lacks: root broadcasts its entries' digests, every rank marks an entry
 * it does not hold or holds otherwise, and the marks are summed over the group.
 */
async function entriesToSend(
  group: ProcessGroup,
  root: number,
  targets: readonly StateValue[],
  held: readonly boolean[],
): Promise<boolean[]> {
  const digests = new Int32Array(2 * targets.length);
  const mine = targets.map((target, i) => (held[i] ? stateDigest(wordsOf(target).words) : null));
  if (group.rank === root) {
    for (const [i, d] of mine.entries()) digests.set(d!, 2 * i);
  }
  await group.broadcast(digests, root).wait();
  const lacking = Int32Array.from(mine, (d, i) =>
    d === null || d[0] !== digests[2 * i] || d[1] !== digests[2 * i + 1] ? 1 : 0,
  );
  await group.allReduce(lacking, { op: 'sum' }).wait();
  return Array.from(lacking, (count) => count > 0);
}
