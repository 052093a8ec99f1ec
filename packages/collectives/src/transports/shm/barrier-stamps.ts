import type { AbortReason } from '../../errors.js';
import { isFingerprintStamp, opKindName, opStamp } from '../../op-stamp.js';
import type { BarrierStamp } from '../../shared-arena.js';
import type { ShmOffsets } from './shm-layout.js';

/** Where a rank's arena stands when it arrives at a barrier, beside the op it serves. */
export interface ArenaPosition {
  /** The barrier's epoch (1, 2, ... on every rank alike). */
  readonly epoch: number;
  /** The set of slots the next round takes (`SharedArena.nextRound`). */
  readonly round: number;
  /** The set of exchange slots the next exchange takes. */
  readonly exchange: number;
}

/** Words of a stamp: epoch, op code, seq, tag, round, exchange. */
const STAMP_WORDS = 6;

/**
 * [Note: barrier stamps]
 * The shared-memory collectives move no messages: each rank reads the others' slots of the set of
 * its own round counter, and the barrier's epochs only say that every rank has arrived at as many
 * barriers. So two ranks whose schedules took a different number of rounds (issue 44: a registered
 * reduce-scatter that staged its output through a slot on the ranks whose output lay in another
 * segment, and wrote it in place on the others) pass every later barrier together while reading
 * each other's slots of different sets: another op's bytes, taken as data, with no error.
 *
 * So every arrival carries a stamp: the epoch, the op it serves (kind, sequence number, group
 * tag; or the fingerprint exchange that opens an op; nothing for a node's own barriers in a
 * two-level world) and where this rank's arena stands
 * (the set its next round takes, the exchange slots its next exchange takes). A rank writes it
 * into its stamp of the epoch's parity before it publishes its arrival (`Atomics.store`, after
 * which every peer that sees the arrival sees the stamp), and once every rank has arrived it
 * compares each peer's stamp with its own: anything unlike is a `mismatch` abort naming both
 * positions, raised before any byte of the round is read. Two fingerprint exchanges compare only
 * the epoch and the arena's position: when the calls differ, the fingerprints that follow name
 * them better (`CollectiveMismatchError` with both calls). Two stamps a rank suffice: a peer that
 * passed this barrier may be at the next (the other parity) but no further, as that one waits
 * for this rank. The check costs six stores and six loads a peer per barrier; a 4-byte all-gather
 * has two barriers.
 */
export function writeStamp(
  words: Int32Array,
  offsets: ShmOffsets,
  rank: number,
  position: ArenaPosition,
  stamp: BarrierStamp | undefined,
): void {
  const at = offsets.stamp(rank, position.epoch & 1);
  Atomics.store(words, at, position.epoch);
  // The op's kind as the messages' op stamps code it ([Note: op stamps]), 0 for none.
  const code = stamp === undefined ? 0 : opStamp(stamp.op, 0, stamp.fingerprint).op;
  Atomics.store(words, at + 1, code);
  Atomics.store(words, at + 2, stamp?.seq ?? -1);
  Atomics.store(words, at + 3, stamp?.tag ?? -1);
  Atomics.store(words, at + 4, position.round);
  Atomics.store(words, at + 5, position.exchange);
}

function describe(words: Int32Array, at: number): string {
  const code = words[at + 1]!;
  const seq = words[at + 2]!;
  const group = words[at + 3];
  let served = `${opKindName(code)} #${seq} of group ${group}`;
  if (isFingerprintStamp(code)) served = `the fingerprints of op #${seq} of group ${group}`;
  if (seq < 0) served = 'a node barrier';
  return `barrier ${words[at]} (${served}, round set ${words[at + 4]}, exchange slots ${words[at + 5]})`;
}

/**
 * Compares every peer's stamp of `epoch` with this rank's, once all have arrived: the abort
 * reason of the first that differs, or null.
 */
export function checkStamps(
  words: Int32Array,
  offsets: ShmOffsets,
  rank: number,
  size: number,
  epoch: number,
  stamp: BarrierStamp | undefined,
): AbortReason | null {
  const mine = offsets.stamp(rank, epoch & 1);
  for (let peer = 0; peer < size; peer++) {
    if (peer === rank) continue;
    const theirs = offsets.stamp(peer, epoch & 1);
    // Two fingerprint exchanges leave the calls (kind, seq and group) to the fingerprints.
    const exchanges =
      isFingerprintStamp(words[mine + 1]!) && isFingerprintStamp(Atomics.load(words, theirs + 1));
    let same = true;
    for (let w = 0; w < STAMP_WORDS; w++) {
      if (exchanges && w >= 1 && w <= 3) continue;
      if (Atomics.load(words, theirs + w) !== words[mine + w]) same = false;
    }
    if (same) continue;
    const snapshot = new Int32Array(2 * STAMP_WORDS);
    for (let w = 0; w < STAMP_WORDS; w++) {
      snapshot[w] = words[mine + w]!;
      snapshot[STAMP_WORDS + w] = Atomics.load(words, theirs + w);
    }
    return {
      kind: 'mismatch',
      origin: rank,
      peer,
      ...(stamp === undefined ? {} : { op: stamp.op, seq: stamp.seq, tag: stamp.tag }),
      message: `rank ${rank} arrived at ${describe(snapshot, 0)} but rank ${peer} at ${describe(snapshot, STAMP_WORDS)}: their shared-memory schedules diverged, so the slots hold another op's bytes (none was used)`,
    };
  }
  return null;
}
