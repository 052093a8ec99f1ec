import { ArgumentError } from '@webshard/tensor-core';
import type { ProcessGroup } from '../process-group.js';
import { ElasticError } from './errors.js';
import type { StateEntries, StateValue } from './state-transfer.js';

/*
 * [Note: a state in slices from several members]
 * A newcomer over a home link downloads minutes of state ([Note: a compressed join] in
 * @webshard/diloco). Every member holds the same state, so each sends one slice of it: the
 * entries laid end to end (each padded to 4 bytes) make one stream of 32-bit words, cut into as
 * many contiguous slices as there are senders, each sent in chunks (`chunkBytes`) by point-to-
 * point sends. No member's uplink carries more than its share, and the newcomer's downlink takes
 * the slices at once: the receiver posts one chunk of each sender in turn (a group runs its ops in
 * order), so the slices flow together at the pace of the slowest sender, the others' chunks
 * waiting in their sockets meanwhile. The first sender also sends the manifest (names, element
 * types, lengths).
 * The receiver writes every chunk into one buffer and hands out the entries only when every chunk
 * of every slice is in: a sender lost mid-transfer (its group aborts, or an op runs past its
 * deadline) rejects the receive with a `StateTransferError` saying how many bytes had arrived, and
 * nothing of the half-received state is ever returned, so a newcomer never holds a mix. It then
 * joins again at the next sync point (its admission is cheap; the bytes are the cost).
 * The sends and receives go through the group's queue like any op: run them on a group of their
 * own (`ProcessGroup.newGroup` over the same ranks) so that the members' collectives never queue
 * behind minutes of slices ([Note: catching up a join] in @webshard/diloco).
 */

const KINDS = ['f32', 'i32', 'u16', 'u8'] as const;
type Kind = (typeof KINDS)[number];

interface Laid {
  readonly name: string;
  readonly kind: Kind;
  readonly length: number;
  /** First word of the entry in the stream. */
  readonly word: number;
}

/** How the slices go: who sends, who receives, in what chunks. */
export interface SliceTransferOptions {
  /** Group ranks that hold the state (the same bits on each) and send one slice each. */
  readonly senders: readonly number[];
  /** Group ranks that receive the whole state. */
  readonly receivers: readonly number[];
  /** Bytes a point-to-point op carries (default 1 MiB). */
  readonly chunkBytes?: number;
  /** Deadline of each op, as the group's ops take (default: the group's). */
  readonly timeoutMs?: number;
}

/** A sender's options: also how fast its uplink may carry the slice. */
export interface SliceSendOptions extends SliceTransferOptions {
  /**
   * Bytes a second this sender issues at most (default: no limit): a chunk is sent only once the
   * bytes before it had their time, so a member's uplink keeps room for its own outer syncs.
   */
  readonly bytesPerSecond?: number;
}

/** A receiver's options: also who to tell of the progress. */
export interface SliceReceiveOptions extends SliceTransferOptions {
  /** Called after every chunk with the bytes received and the total. */
  readonly onProgress?: (receivedBytes: number, totalBytes: number) => void;
}

/** A sliced state transfer failed: a sender was lost or ran past its deadline. */
export class StateTransferError extends ElasticError {
  readonly receivedBytes: number;
  readonly totalBytes: number;
  /** The group rank whose slice did not arrive first. */
  readonly sender: number;
  constructor(fields: {
    receivedBytes: number;
    totalBytes: number;
    sender: number;
    cause: unknown;
  }) {
    const reason = fields.cause instanceof Error ? fields.cause.message : String(fields.cause);
    super(
      'transfer',
      `the state's slice from rank ${fields.sender} did not arrive (${fields.receivedBytes} of ${fields.totalBytes} bytes received; nothing was kept): ${reason}`,
      { code: 'E_TRANSFER', cause: fields.cause },
    );
    this.receivedBytes = fields.receivedBytes;
    this.totalBytes = fields.totalBytes;
    this.sender = fields.sender;
  }
}

function kindOf(value: StateValue): Kind {
  if (value instanceof Float32Array) return 'f32';
  if (value instanceof Int32Array) return 'i32';
  if (value instanceof Uint16Array) return 'u16';
  return 'u8';
}

const BYTES: Record<Kind, number> = { f32: 4, i32: 4, u16: 2, u8: 1 };

function layout(manifest: readonly Omit<Laid, 'word'>[]): { laid: Laid[]; words: number } {
  let word = 0;
  const laid = manifest.map((entry) => {
    const at = { ...entry, word };
    word += Math.ceil((entry.length * BYTES[entry.kind]) / 4);
    return at;
  });
  return { laid, words: word };
}

/** `[start, end)` word ranges, one a sender, contiguous, as even as words allow. */
function slices(words: number, senders: number): [number, number][] {
  return Array.from({ length: senders }, (_, i) => [
    Math.floor((words * i) / senders),
    Math.floor((words * (i + 1)) / senders),
  ]);
}

function chunksOf(start: number, end: number, chunkWords: number): [number, number][] {
  const out: [number, number][] = [];
  for (let at = start; at < end; at += chunkWords) out.push([at, Math.min(end, at + chunkWords)]);
  return out;
}

function check(group: ProcessGroup, options: SliceTransferOptions, op: string): number {
  const { senders, receivers } = options;
  const ranks = [...senders, ...receivers];
  if (
    senders.length === 0 ||
    receivers.length === 0 ||
    new Set(ranks).size !== ranks.length ||
    ranks.some((r) => !Number.isInteger(r) || r < 0 || r >= group.size)
  ) {
    throw new ArgumentError(
      op,
      `senders [${senders.join(', ')}] and receivers [${receivers.join(', ')}] must be distinct ranks of a group of ${group.size}, at least one of each`,
    );
  }
  const chunkBytes = options.chunkBytes ?? 1 << 20;
  if (!Number.isInteger(chunkBytes) || chunkBytes < 4 || chunkBytes % 4 !== 0) {
    throw new ArgumentError(op, `chunkBytes must be a whole multiple of 4, got ${chunkBytes}`);
  }
  return chunkBytes / 4;
}

/** Copies stream words `[start, end)` of `entries` (laid as `laid`) into `out`. */
function readWords(
  entries: StateEntries,
  laid: Laid[],
  start: number,
  end: number,
  out: Int32Array,
) {
  const bytes = new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
  bytes.fill(0);
  for (const entry of laid) {
    const value = entries.get(entry.name)!;
    const from = Math.max(start, entry.word) * 4 - entry.word * 4;
    const to = Math.min(end * 4 - entry.word * 4, value.byteLength);
    if (to <= from) continue;
    const source = new Uint8Array(value.buffer, value.byteOffset + from, to - from);
    bytes.set(source, entry.word * 4 + from - start * 4);
  }
}

/**
 * A sender's part ([Note: a state in slices from several members]): its slice of `entries`, in
 * chunks, to every receiver; the first sender sends the manifest too. Resolves when all is sent.
 */
export async function sendStateSlices(
  group: ProcessGroup,
  entries: StateEntries,
  options: SliceSendOptions,
): Promise<void> {
  const chunkWords = check(group, options, 'sendStateSlices');
  const rate = options.bytesPerSecond ?? Number.POSITIVE_INFINITY;
  if (!(rate > 0)) {
    throw new ArgumentError('sendStateSlices', `bytesPerSecond must be above 0, got ${rate}`);
  }
  const started = performance.now();
  let issued = 0;
  const index = options.senders.indexOf(group.rank);
  if (index < 0) throw new ArgumentError('sendStateSlices', `rank ${group.rank} is no sender`);
  const manifest = [...entries].map(([name, value]) => ({
    name,
    kind: kindOf(value),
    length: value.length,
  }));
  const { laid, words } = layout(manifest);
  const op = options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs };
  const works = [];
  for (const receiver of options.receivers) {
    if (index === 0) {
      const bytes = new TextEncoder().encode(JSON.stringify(manifest));
      const padded = new Int32Array(Math.ceil(bytes.byteLength / 4));
      new Uint8Array(padded.buffer).set(bytes);
      works.push(group.send(Int32Array.of(bytes.byteLength), receiver, op));
      works.push(group.send(padded, receiver, op));
    }
    const [start, end] = slices(words, options.senders.length)[index]!;
    for (const [from, to] of chunksOf(start, end, chunkWords)) {
      const chunk = new Int32Array(to - from);
      readWords(entries, laid, from, to, chunk);
      issued += chunk.byteLength;
      const due = started + (issued / rate) * 1000 - performance.now();
      if (due > 0) await new Promise((resolve) => setTimeout(resolve, due));
      works.push(group.send(chunk, receiver, op));
    }
  }
  await Promise.all(works.map((work) => work.wait()));
}

/**
 * A receiver's part ([Note: a state in slices from several members]): every sender's slice,
 * reassembled; the entries only once all arrived, else a `StateTransferError`.
 */
export async function receiveStateSlices(
  group: ProcessGroup,
  options: SliceReceiveOptions,
): Promise<Map<string, StateValue>> {
  const chunkWords = check(group, options, 'receiveStateSlices');
  if (!options.receivers.includes(group.rank)) {
    throw new ArgumentError('receiveStateSlices', `rank ${group.rank} is no receiver`);
  }
  const first = options.senders[0]!;
  const op = options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs };
  let received = 0;
  let total = 0;
  const fail = (sender: number) => (cause: unknown) => {
    throw new StateTransferError({ receivedBytes: received, totalBytes: total, sender, cause });
  };
  const manifestLength = new Int32Array(1);
  await group.recv(manifestLength, first, op).wait().catch(fail(first));
  const manifestWords = new Int32Array(Math.ceil(manifestLength[0]! / 4));
  await group.recv(manifestWords, first, op).wait().catch(fail(first));
  const manifest = JSON.parse(
    new TextDecoder().decode(new Uint8Array(manifestWords.buffer, 0, manifestLength[0]!)),
  ) as Omit<Laid, 'word'>[];
  const { laid, words } = layout(manifest);
  total = words * 4;
  const stream = new Int32Array(words);
  const perSender = slices(words, options.senders.length).map(([start, end]) =>
    chunksOf(start, end, chunkWords),
  );
  // Round robin over the senders, so that every slice flows at once through the one queue.
  const pending: Promise<void>[] = [];
  const longest = Math.max(...perSender.map((chunks) => chunks.length));
  for (let c = 0; c < longest; c++) {
    for (const [i, sender] of options.senders.entries()) {
      const chunk = perSender[i]![c];
      if (chunk === undefined) continue;
      const [from, to] = chunk;
      const into = stream.subarray(from, to);
      const done = group
        .recv(into, sender, op)
        .wait()
        .then(() => {
          received += (to - from) * 4;
          options.onProgress?.(received, total);
        }, fail(sender));
      pending.push(done);
    }
  }
  const settled = await Promise.allSettled(pending);
  const failure = settled.find((s) => s.status === 'rejected');
  if (failure !== undefined) throw (failure as PromiseRejectedResult).reason;
  // Views of the one buffer (every entry starts on a word): no second copy of the state.
  const result = new Map<string, StateValue>();
  for (const { name, kind, length, word } of laid) {
    const at = word * 4;
    const { buffer } = stream;
    if (kind === 'f32') result.set(name, new Float32Array(buffer, at, length));
    else if (kind === 'i32') result.set(name, new Int32Array(buffer, at, length));
    else if (kind === 'u16') result.set(name, new Uint16Array(buffer, at, length));
    else result.set(name, new Uint8Array(buffer, at, length));
  }
  return result;
}
