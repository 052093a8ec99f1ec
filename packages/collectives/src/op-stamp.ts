import { ArgumentError } from '@webshard/tensor-core';
import type { AbortReason } from './errors.js';

/**
 * [Note: op stamps]
 * A message of one op can never pass as the data of another (issue 44). The ops of a group meet
 * by order: every rank's k-th call is op k, its fingerprint checks that the calls agree ([Note:
 * fingerprints ahead of the data]), and then each peer's messages fill the op's receives in FIFO
 * order per (peer, tag). That order alone used to say which op a message belonged to, so one
 * message lost, duplicated or left over on a stream (a transport bug, a peer whose op sent one
 * message more than the receiver's took) would fill the next receive of the right length with
 * another op's bytes, and the result would be wrong without an error. Now every message carries
 * its op's identity, and the receive it meets checks it before a byte lands.
 *
 * The identity is five things. The group is the tag, which routes the message: it only ever
 * meets receives of its own group. The sender and the byte count each message has anyway. The op
 * is the stamp: its kind (`OP_KINDS`; a `recv` expects its peer's `send`) and its sequence
 * number in the group (per peer and direction for send and recv). `OpContext` gives every send
 * and receive of an op the op's stamp, and its fingerprint message the same stamp with bit 0x80.
 *
 * How it travels: `tcp` and `ws` in the frame header (op byte and op seq word, [Note: network
 * frames]); a relayed frame carries its inner header unchanged, so a browser tab's messages and
 * the relay's keep it; `shm` in each ring message's header (ring-header.ts: tag, length, sender,
 * op, op seq); `local` as arguments of `Mailbox.deliver` (nothing is serialized); the two-level
 * transport and the link shaper pass it to the transport under them. A data frame's sender is
 * the one its header names, compared with the connection's peer where it meets its receive (a
 * control frame's at once); a ring's and the hub's is the sending rank's own.
 *
 * Where it is checked: in one place, `Mailbox` (`stampMismatch`), the receive queue of every
 * transport here, at the moment a message meets a posted receive, whichever came first: a
 * receive that finds the message stashed (`recv`), a message whose receive is posted (`begin`,
 * before a byte is read into it), a stashed message completed after its receive was posted
 * (`complete`). A message that is not the receive's (another sender, length, kind or seq) rejects
 * the receive and aborts the transport with a `mismatch` reason naming both, which every rank's
 * op turns into `CollectiveMismatchError`: `[allGather] rank 1 (seq 145): received rank 0's
 * allReduce seq 146 (4096 bytes) where allGather seq 145 (8 bytes) was expected`. Ranks in it are
 * the transport's (world ranks; a node's shm world in a two-level world counts its local ranks).
 * Unlike the fingerprint's mismatch it is raised at once ([Note: a mismatch waits for every
 * fingerprint]): the calls agreed, a stream is out of step, and nothing more on it can be
 * trusted. A receive that expects a fingerprint takes any op's fingerprint: its payload names the
 * op and its seq with dtype, count and root, which the fingerprint exchange compares with its
 * fuller message and its wait, so a mismatch of calls still reads as before. Messages with no
 * stamp on either side (code that runs no op, as the transport suite) keep rule 3's length error.
 *
 * Cost per message: 4 bytes more of tcp/ws header (36 instead of 32), 12 of ring header, and a
 * few integer compares where it meets its receive (measured in packages/collectives/README.md).
 */

/**
 * What a point-to-point message says about the op it belongs to, beside what every message
 * carries anyway (its group's tag, its sender and its byte count): the op's kind and sequence
 * number ([Note: op stamps]).
 */
export interface OpStamp {
  /** The op's kind, an index of `OP_KINDS`; bit 0x80 marks the op's fingerprint message. */
  readonly op: number;
  /** The op's sequence number in its group (per peer and direction for send and recv). */
  readonly seq: number;
}

/** The stamp of a message sent or expected by code that runs no op (the transport suite). */
export const NO_STAMP: OpStamp = Object.freeze({ op: 0, seq: 0 });

/** The kinds an op stamp names, by code: a `recv` expects its peer's `send`. */
const OP_KINDS = [
  'none',
  'allReduce',
  'allGather',
  'reduceScatter',
  'broadcast',
  'barrier',
  'send',
];
const FINGERPRINT = 0x80;
const KIND_MASK = 0x7f;

/** Whether `op` (a stamp's byte as it came off a wire) names a known kind. */
export function knownOpKind(op: number): boolean {
  return (op & KIND_MASK) < OP_KINDS.length;
}

/** The stamp of `op`'s messages (`fingerprint`: of its fingerprint message) with `seq`. */
export function opStamp(op: string, seq: number, fingerprint = false): OpStamp {
  const kind = OP_KINDS.indexOf(op === 'recv' ? 'send' : op);
  if (kind <= 0) throw new ArgumentError(op, `no op stamp for an op named '${op}'`);
  return { op: fingerprint ? kind | FINGERPRINT : kind, seq: seq >>> 0 };
}

/** The name of a stamp's op kind (`allReduce`, ...), whether or not it marks a fingerprint. */
export function opKindName(op: number): string {
  return OP_KINDS[op & KIND_MASK] ?? `op kind ${op & KIND_MASK}`;
}

/** Whether a stamp's op marks the op's fingerprint message. */
export function isFingerprintStamp(op: number): boolean {
  return (op & FINGERPRINT) !== 0;
}

function describe(sender: number | null, stamp: OpStamp, bytes: number): string {
  const whose = sender === null ? '' : `rank ${sender}'s `;
  if (stamp.op === 0) return `${whose}message without an op stamp (${bytes} bytes)`;
  const kind = opKindName(stamp.op);
  const what = stamp.op & FINGERPRINT ? `${kind} fingerprint` : kind;
  return `${whose}${what} seq ${stamp.seq} (${bytes} bytes)`;
}

/**
 * The check every receive makes when a message meets it ([Note: op stamps]): null when the
 * message from `sender` stamped `stamp`, `bytes` long, is what the receive from `peer` on `tag`
 * expects (`expected`, `dst.byteLength`), else the reason to abort with. A receive that expects a
 * fingerprint takes any op's fingerprint: its payload holds the op and is compared by the group.
 * Messages without stamps on both sides (code that runs no op) keep rule 3's length error.
 */
export function stampMismatch(
  rank: number,
  peer: number,
  tag: number,
  expected: OpStamp,
  expectedBytes: number,
  sender: number,
  stamp: OpStamp,
  bytes: number,
): AbortReason | null {
  const sameOp =
    expected.op & FINGERPRINT
      ? (stamp.op & FINGERPRINT) !== 0
      : expected.op === stamp.op && expected.seq === stamp.seq;
  if (sameOp && sender === peer && bytes === expectedBytes) return null;
  if (expected.op === 0 && stamp.op === 0 && sender === peer) {
    return {
      kind: 'error',
      origin: rank,
      peer,
      message: `rank ${rank} expected a message of ${expectedBytes} bytes from rank ${peer} on tag ${tag}, got ${bytes}`,
    };
  }
  const received = describe(sender, stamp, bytes);
  const wanted = describe(sender === peer ? null : peer, expected, expectedBytes);
  return {
    kind: 'mismatch',
    origin: rank,
    peer,
    tag,
    seq: expected.seq,
    message: `received ${received} where ${wanted} was expected`,
  };
}
