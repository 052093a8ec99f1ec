import type { AbortReason } from '../errors.js';
import type { Transport } from '../transport-contract.js';

/** One op a rank is running, as it reports it to a blame poll. */
export interface RunningOp {
  /** The transport tag of the op's group. */
  readonly tag: number;
  readonly op: string;
  readonly seq: number;
  /** Global ranks whose messages (or barrier arrival) the op still waits for. */
  readonly waitingFor: readonly number[];
}

/**
 * What a rank answers when a peer's deadline asks where it is: see [Note: blaming a stalled
 * rank]. Plain JSON: it travels through the rendezvous store.
 */
export interface ProgressReport {
  /** The global rank that answers. */
  readonly rank: number;
  /** The ops it is running now, on every group of its transport. */
  readonly ops: readonly RunningOp[];
  /** Per group tag (as a decimal string), the highest collective sequence number it has started. */
  readonly reached: Readonly<Record<string, number>>;
  /** Why its transport aborted, once it has: a rank that saw the failure first says what it saw. */
  readonly abort?: AbortReason;
}

/**
 * How the ranks of a transport ask each other where they are, over a path that does not share the
 * data path's fate (the rendezvous store, shared memory). Each rank's board answers polls with its
 * own report for as long as its event loop runs; a rank that is stopped cannot answer.
 */
export interface ProgressBoard {
  /**
   * Asks `ranks` for their reports and resolves with those that answered within `windowMs` (a rank
   * missing from the map did not answer), with null when the medium itself failed (the store is
   * gone): then nobody's silence means anything, or with `MediumSilence` when the medium's host
   * stopped answering (its rank is then to blame). Never rejects.
   */
  poll(
    ranks: readonly number[],
    windowMs: number,
  ): Promise<Map<number, ProgressReport> | MediumSilence | null>;
}

/**
 * A poll's medium went silent: the rank that hosts it (rank 0 hosts the rendezvous store) answered
 * nothing within the poll's deadline, so it is stopped or hung ([Note: a silent store host]).
 */
export interface MediumSilence {
  readonly kind: 'silent';
  /** The global rank that hosts the medium. */
  readonly host: number;
  /** Why it is blamed, for the error message. */
  readonly detail: string;
}

/** The ops a transport's groups are running, and how far each group has got. */
export class ProgressTracker {
  private readonly running = new Set<{ readonly view: () => RunningOp }>();
  private readonly reached = new Map<number, number>();

  /**
   * Records an op that started; `view` says what it waits for when asked. Returns the function
   * that removes it when the op settles.
   */
  started(tag: number, seq: number, collective: boolean, view: () => RunningOp): () => void {
    if (collective && seq > (this.reached.get(tag) ?? -1)) this.reached.set(tag, seq);
    const entry = { view };
    this.running.add(entry);
    return () => this.running.delete(entry);
  }

  report(rank: number, abort: AbortReason | null): ProgressReport {
    return {
      rank,
      ops: [...this.running].map((entry) => entry.view()),
      reached: Object.fromEntries([...this.reached].map(([tag, seq]) => [String(tag), seq])),
      ...(abort === null ? {} : { abort }),
    };
  }
}

interface ProgressRecord {
  readonly tracker: ProgressTracker;
  board: ProgressBoard | null;
  /** Set by `silenceProgress`: the rank answers no poll, as a stopped process cannot. */
  silent: boolean;
}

const records = new WeakMap<Transport, ProgressRecord>();

function recordOf(transport: Transport): ProgressRecord {
  let record = records.get(transport);
  if (record === undefined) {
    record = { tracker: new ProgressTracker(), board: null, silent: false };
    records.set(transport, record);
  }
  return record;
}

/** The tracker of the ops running on `transport` (one per transport, made on first use). */
export function progressTrackerOf(transport: Transport): ProgressTracker {
  return recordOf(transport).tracker;
}

/**
 * This rank's report for a poll: the ops running on `transport` and its abort reason; null when
 * the rank was silenced (it does not answer).
 */
export function progressReportOf(transport: Transport): ProgressReport | null {
  const record = recordOf(transport);
  if (record.silent) return null;
  return record.tracker.report(transport.rank, transport.abortReason);
}

/**
 * Fault injection: `transport`'s rank stops answering polls, as a stopped process (SIGSTOP) or a
 * blocked thread would. Nothing undoes it.
 */
export function silenceProgress(transport: Transport): void {
  recordOf(transport).silent = true;
}

/** The board a deadline on `transport` polls, or null (then the deadline blames as before). */
export function progressBoardOf(transport: Transport): ProgressBoard | null {
  return recordOf(transport).board;
}

/** Makes `board` the one deadlines on `transport` poll. */
export function attachProgressBoard(transport: Transport, board: ProgressBoard): void {
  recordOf(transport).board = board;
}

/**
 * Makes `wrapper` (a transport that forwards to `inner`, such as the one that also owns the
 * rendezvous) share `inner`'s tracker and board, so reports describe the ops of both.
 */
export function shareProgress(wrapper: Transport, inner: Transport): void {
  records.set(wrapper, recordOf(inner));
}
