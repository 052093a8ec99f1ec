import { type AbortReason, CollectiveMismatchError } from '../errors.js';
import { bytesOf, type CommDType } from '../operand.js';
import { splitAddress } from '../registered-segments.js';
import type { SharedArena } from '../shared-arena.js';
import type { GroupView, OpContext } from './op-context.js';

const OP_CODES: Record<string, number> = {
  allReduce: 1,
  allGather: 2,
  reduceScatter: 3,
  broadcast: 4,
  barrier: 5,
  send: 6,
  recv: 6,
};
const OP_NAMES = [
  '?',
  'allReduce',
  'allGather',
  'reduceScatter',
  'broadcast',
  'barrier',
  'send/recv',
];
const DTYPE_CODES: Record<string, number> = { none: 0, f32: 1, f16: 2, bf16: 3, i32: 4 };
const DTYPE_NAMES = ['none', 'f32', 'f16', 'bf16', 'i32'];
/** The reduce ops in the order of their fingerprint code (`FingerprintInit.extra`). */
export const REDUCE_NAMES = ['sum', 'avg', 'max', 'min', 'product'];
const FINGERPRINT_MAGIC = 0x57534643; // "WSFC"
const FINGERPRINT_WORDS = 6;
/** Words per rank in `SharedArena.exchange`'s result. */
const SHARED_EXCHANGE_STRIDE = 16;

/** What one call tells its peers about itself (see [Note: fingerprints ahead of the data]). */
export interface FingerprintInit {
  readonly op: string;
  readonly dtype: CommDType | 'none';
  readonly count: number;
  /** Reduce op index, root, or 0. */
  readonly extra: number;
  /**
   * Address of the operand in the shared arena's segments when it is a registered buffer, else -1:
   * sent beside the fingerprint through the arena (offset and segment), not compared (see
   * [Note: registered buffers] and [Note: growing registered memory]).
   */
  readonly registered?: number;
}

function describeFingerprint(words: Int32Array, offset: number): string {
  if (words[offset] !== FINGERPRINT_MAGIC) return 'an unrecognized message';
  const op = OP_NAMES[words[offset + 1]!] ?? '?';
  const seq = words[offset + 2]!;
  const dtype = DTYPE_NAMES[words[offset + 3]!] ?? '?';
  const count = words[offset + 4]!;
  const extra = words[offset + 5]!;
  let detail = '';
  if (op === 'allReduce' || op === 'reduceScatter') detail = `${REDUCE_NAMES[extra] ?? '?'}, `;
  if (op === 'broadcast') detail = `root ${extra}, `;
  return `${op}(${detail}${dtype} x ${count}) as op #${seq}`;
}

/**
 * Every rank's registered operand from the op's shared-memory fingerprint exchange, or null unless
 * all ranks' operands are registered buffers in one segment (see [Note: registered buffers] and
 * [Note: growing registered memory]): the segment, and each rank's byte offset in it.
 */
export function registeredOffsetsOf(
  ctx: OpContext,
  size: number,
): { segment: number; offsets: number[] } | null {
  const words = ctx.sharedWords;
  if (words === null) return null;
  const offsets: number[] = [];
  const segment = words[FINGERPRINT_WORDS + 1]!;
  for (let peer = 0; peer < size; peer++) {
    const offset = words[peer * SHARED_EXCHANGE_STRIDE + FINGERPRINT_WORDS]!;
    if (offset < 0 || words[peer * SHARED_EXCHANGE_STRIDE + FINGERPRINT_WORDS + 1] !== segment)
      return null;
    offsets.push(offset);
  }
  return { segment, offsets };
}

/**
 * The per-op fingerprint of one group and the check that every peer made the same call: over the
 * shared arena where the group runs its collectives through one, else as the first message of
 * the op to each peer.
 */
export class FingerprintExchange {
  private readonly out = new Int32Array(FINGERPRINT_WORDS);
  private readonly sharedOut = new Int32Array(FINGERPRINT_WORDS + 2);
  private incoming = new Int32Array(0);

  /** `sharedArena`: the arena the group runs collectives through, or null. */
  constructor(
    private readonly group: GroupView,
    private readonly sharedArena: () => SharedArena | null,
  ) {}

  /** Whether an op's fingerprints go through the shared arena (one barrier) instead of messages. */
  isShared(fingerprint: FingerprintInit): boolean {
    if (fingerprint.op === 'send' || fingerprint.op === 'recv') return false;
    return this.sharedArena() !== null;
  }

  /**
   * [Note: fingerprints ahead of the data]
   * Over messages the fingerprint is the first message of an op to each peer, and the op's body
   * starts at once instead of a round trip later: its sends follow the fingerprint on the wire, and
   * its receives from a peer are held (`OpContext.gate`) until that peer's fingerprint has arrived
   * and matched, then posted in order. The check runs in the transport's arrival hint where it has
   * one (rule 9 of [Note: the transport contract]): the fingerprint and the head of the data
   * usually come in one read, and checked a microtask later the data found no receive posted and
   * was copied aside, one segment per op and peer. A mismatched peer's data therefore never meets a posted
   * receive (it waits in the transport until the abort discards it), so a wrong count still fails
   * as `CollectiveMismatchError`, never as a length error. The shared-memory exchange is a barrier
   * and still runs before the body.
   *
   * [Note: a mismatch waits for every fingerprint]
   * A rank that finds a peer's fingerprint unlike its own does not abort at once: it holds the
   * mismatch (that peer's receives stay closed, so none of its data lands) and raises it once the
   * fingerprints of every peer of the op are in. A rank sends op k's fingerprint only after its op
   * k - 1 settled (ops run in issue order), so by then every rank has finished op k - 1, and the
   * abort fails op k everywhere, the op whose calls differ. Raised at once, it could reach a rank
   * still finishing op k - 1 and fail that op there instead (with op k's message and seq k - 1),
   * so that rank never reached op k: in a two-level world the two ranks of the node that found the
   * mismatch among themselves were often a phase ahead of the other node, whose ranks then ended
   * the two-level suite's failure scenarios without a report (one full run in three under load).
   * PyTorch's fingerprint check (`TORCH_DISTRIBUTED_DEBUG=DETAIL`, `ProcessGroupWrapper`) is an
   * all-gather, so it too meets every rank first. The cost is only when a mismatch shows: when the
   * slowest rank reaches the op, and if one never does, at the op's deadline, which then raises the
   * mismatch rather than a timeout (`OpContext.heldMismatch`). The shared-memory exchange, a
   * barrier, always met every rank first.
   */
  async exchange(
    ctx: OpContext,
    seq: number,
    sendTo: readonly number[],
    recvFrom: readonly number[],
    fingerprint: FingerprintInit,
  ): Promise<void> {
    if (sendTo.length === 0 && recvFrom.length === 0) return;
    const { rank, size } = this.group;
    const out = this.out;
    out[0] = FINGERPRINT_MAGIC;
    out[1] = OP_CODES[fingerprint.op]!;
    out[2] = seq;
    out[3] = DTYPE_CODES[fingerprint.dtype]!;
    out[4] = fingerprint.count;
    out[5] = fingerprint.extra;
    const arena = this.isShared(fingerprint) ? this.sharedArena() : null;
    if (arena !== null) {
      // Every rank's fingerprint through shared memory: one barrier instead of n - 1 messages.
      const shared = this.sharedOut;
      shared.set(out);
      const address = fingerprint.registered ?? -1;
      const { segment, offset } = address < 0 ? { segment: -1, offset: -1 } : splitAddress(address);
      shared[FINGERPRINT_WORDS] = offset;
      shared[FINGERPRINT_WORDS + 1] = segment;
      // The stamp of [Note: barrier stamps]: two exchanges compare their arenas' positions only,
      // as the fingerprints name two different calls better.
      const stamp = { op: fingerprint.op, seq, tag: this.group.tag, fingerprint: true };
      const all = await arena.exchange(shared, (ranks) => ctx.waitFor(ranks), stamp);
      ctx.waitFor([]);
      ctx.sharedWords = all;
      for (let peer = 0; peer < size; peer++) {
        if (peer === rank) continue;
        const at = peer * SHARED_EXCHANGE_STRIDE;
        for (let w = 0; w < FINGERPRINT_WORDS; w++) {
          if (all[at + w] !== out[w])
            this.mismatch(ctx, peer, describeFingerprint(out, 0), describeFingerprint(all, at));
        }
      }
      return;
    }
    if (this.incoming.length < size * FINGERPRINT_WORDS) {
      this.incoming = new Int32Array(size * FINGERPRINT_WORDS);
    }
    const incoming = this.incoming;
    const outBytes = bytesOf(out);
    const pending: Promise<void>[] = [];
    for (const peer of sendTo) pending.push(ctx.sendFingerprint(peer, outBytes));
    // Checked once per peer: where the transport gives the arrival hint, synchronously as the
    // fingerprint lands (so the held receives are posted before the data behind it is parsed),
    // else when the receive resolves. The first mismatch is held, its peer's receives stay closed,
    // and it is raised once every fingerprint is in ([Note: a mismatch waits for every
    // fingerprint]), or by the op's deadline.
    const checked = new Set<number>();
    let held: { peer: number; mine: string; theirs: string } | null = null;
    const raise = () => {
      ctx.heldMismatch = null;
      if (held !== null) this.mismatch(ctx, held.peer, held.mine, held.theirs);
    };
    const check = (peer: number) => {
      if (checked.has(peer)) return;
      checked.add(peer);
      const at = peer * FINGERPRINT_WORDS;
      for (let w = 0; w < FINGERPRINT_WORDS; w++) {
        if (incoming[at + w] === out[w]) continue;
        if (held === null) {
          const theirs = describeFingerprint(incoming, at);
          held = { peer, mine: describeFingerprint(out, 0), theirs };
          ctx.heldMismatch = raise;
        }
        return;
      }
      ctx.open(peer);
    };
    // The body's receives from a peer wait for that peer's fingerprint (posted after it).
    for (const peer of recvFrom) ctx.gate(peer);
    const checks = recvFrom.map((peer) =>
      ctx
        .recvFingerprint(
          peer,
          new Uint8Array(incoming.buffer, peer * FINGERPRINT_WORDS * 4, FINGERPRINT_WORDS * 4),
          () => check(peer),
        )
        .then(() => check(peer)),
    );
    try {
      await Promise.all([...checks, ...pending]);
      raise();
    } catch (error) {
      ctx.failGated(error);
      throw error;
    }
  }

  private mismatch(ctx: OpContext, peer: number, mine: string, theirs: string): never {
    const { rank, transport, tag, ranks } = this.group;
    const message = `rank ${rank} called ${mine} but rank ${peer} called ${theirs}`;
    const reason: AbortReason = {
      kind: 'mismatch',
      origin: transport.rank,
      op: ctx.fields.op,
      seq: ctx.fields.seq,
      tag,
      peer: ranks[peer],
      message,
    };
    ctx.ownError = new CollectiveMismatchError({ ...ctx.fields, peer }, message, { reason });
    transport.abort(reason);
    throw ctx.ownError;
  }
}
