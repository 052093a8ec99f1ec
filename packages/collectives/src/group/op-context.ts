import type { Comm } from '../algorithms/comm.js';
import {
  type AbortReason,
  type CollectiveError,
  type CollectiveErrorFields,
  CollectiveTimeoutError,
  TransportAbortedError,
} from '../errors.js';
import { type OpStamp, opStamp } from '../op-stamp.js';
import type { Transport } from '../transport-contract.js';
import { BLAME_WINDOW_MS, judge, ranksText, type Verdict } from './blame.js';
import {
  type ProgressBoard,
  progressBoardOf,
  progressTrackerOf,
  type RunningOp,
} from '../progress/progress.js';

/** What an op needs of its group: who is in it and where its messages go. */
export interface GroupView {
  /** This rank in the group. */
  readonly rank: number;
  /** The number of ranks in the group. */
  readonly size: number;
  /** The global (transport) rank of each group rank. */
  readonly ranks: readonly number[];
  readonly transport: Transport;
  /** The transport tag of the group's messages. */
  readonly tag: number;
}

const noop = () => {};

/** A receive of the op's body waiting for the peer's fingerprint to be checked. */
interface HeldRecv {
  readonly dst: Uint8Array;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * The running op's view of the group: its fields for errors, the receives it waits for (for the
 * timeout message) and its deadline.
 */
export class OpContext implements Comm {
  readonly waiting = new Map<number, number>();
  private readonly gated = new Map<number, HeldRecv[]>();
  ownError: CollectiveError | null = null;
  /**
   * Raises the mismatch the fingerprint exchange found and holds until every fingerprint is in
   * ([Note: a mismatch waits for every fingerprint] in fingerprint.ts): the deadline raises it
   * when one never comes.
   */
  heldMismatch: (() => void) | null = null;
  /** Every rank's words of the shared-memory fingerprint exchange, when the op had one. */
  sharedWords: Int32Array | null = null;
  /**
   * Rejects once the transport is aborted (by this op's deadline or anything else), whatever the
   * op's body is waiting for: see [Note: ordering, deadlines and abort], the backstop.
   */
  readonly aborted: Promise<never>;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private unsubscribe: () => void = noop;
  private readonly untrack: () => void;
  /** Set when the deadline passed: settles once the group's verdict is in (an abort). */
  private verdict: Promise<void> | null = null;
  /** What the op's messages, and its fingerprint, say they belong to ([Note: op stamps]). */
  private readonly stamp: OpStamp;
  private readonly fingerprintStamp: OpStamp;

  constructor(
    private readonly group: GroupView,
    readonly fields: CollectiveErrorFields,
    readonly timeoutMs: number,
  ) {
    this.aborted = new Promise<never>((_, reject) => {
      this.unsubscribe = group.transport.onAbort((reason) =>
        reject(new TransportAbortedError(reason)),
      );
    });
    this.aborted.catch(noop);
    this.stamp = opStamp(fields.op, fields.seq);
    this.fingerprintStamp = opStamp(fields.op, fields.seq, true);
    const collective = fields.op !== 'send' && fields.op !== 'recv';
    this.untrack = progressTrackerOf(group.transport).started(
      group.tag,
      fields.seq,
      collective,
      () => this.running(),
    );
    this.timer = setTimeout(() => this.expire(), timeoutMs);
  }

  /** What this op tells a blame poll ([Note: blaming a stalled rank]). */
  private running(): RunningOp {
    const waitingFor = [...this.waiting.keys()].sort((a, b) => a - b);
    return {
      tag: this.group.tag,
      op: this.fields.op,
      seq: this.fields.seq,
      waitingFor: waitingFor.map((peer) => this.group.ranks[peer]!),
    };
  }

  /**
   * Settles at once while the deadline has not passed; after it, rejects once the poll of
   * [Note: blaming a stalled rank] has aborted the group, even if the op's data came meanwhile.
   */
  afterDeadline(): Promise<void> {
    if (this.verdict === null) return Promise.resolve();
    return this.verdict.then(() => this.aborted);
  }

  get rank(): number {
    return this.group.rank;
  }

  get size(): number {
    return this.group.size;
  }

  send(peer: number, data: Uint8Array): Promise<void> {
    return this.sendStamped(peer, data, this.stamp);
  }

  /** Sends the op's fingerprint to `peer`, stamped as its fingerprint. */
  sendFingerprint(peer: number, data: Uint8Array): Promise<void> {
    return this.sendStamped(peer, data, this.fingerprintStamp);
  }

  private sendStamped(peer: number, data: Uint8Array, stamp: OpStamp): Promise<void> {
    const { transport, ranks, tag } = this.group;
    const promise = transport.send(ranks[peer]!, tag, data, stamp);
    promise.catch(noop);
    return promise;
  }

  recv(peer: number, dst: Uint8Array): Promise<void> {
    return this.receive(peer, dst, this.gated.get(peer));
  }

  /**
   * The op will receive at most `bytes` in `messages` messages from `peer`: held outside the
   * budget for unclaimed messages until the returned function ends it ([Note: an op's own bytes
   * are expected] in transports/expected-bytes.ts).
   */
  expect(peer: number, bytes: number, messages: number): () => void {
    const { transport, ranks, tag } = this.group;
    return transport.expect?.(ranks[peer]!, tag, this.stamp, bytes, messages) ?? noop;
  }

  /**
   * The receive of `peer`'s fingerprint: never held, with `onArrive` as the transport's arrival
   * hint (rule 9 of [Note: the transport contract]).
   */
  recvFingerprint(peer: number, dst: Uint8Array, onArrive: () => void): Promise<void> {
    return this.receive(peer, dst, undefined, onArrive, this.fingerprintStamp);
  }

  private receive(
    peer: number,
    dst: Uint8Array,
    queue: HeldRecv[] | undefined,
    onArrive?: () => void,
    stamp = this.stamp,
  ): Promise<void> {
    this.waiting.set(peer, (this.waiting.get(peer) ?? 0) + 1);
    const { transport, ranks, tag } = this.group;
    const received =
      queue === undefined
        ? transport.recv(ranks[peer]!, tag, dst, onArrive, stamp)
        : new Promise<void>((resolve, reject) => queue.push({ dst, resolve, reject }));
    const promise = received.then(() => {
      const left = (this.waiting.get(peer) ?? 1) - 1;
      if (left === 0) this.waiting.delete(peer);
      else this.waiting.set(peer, left);
    });
    promise.catch(noop);
    return promise;
  }

  /** Hold the op's receives from `peer` until `open(peer)`: its fingerprint is not checked yet. */
  gate(peer: number): void {
    this.gated.set(peer, []);
  }

  /** `peer`'s fingerprint matched: post its held receives, in the order the op made them. */
  open(peer: number): void {
    const queue = this.gated.get(peer);
    if (queue === undefined) return;
    this.gated.delete(peer);
    const source = this.group.ranks[peer]!;
    const { transport, tag } = this.group;
    for (const held of queue) {
      transport.recv(source, tag, held.dst, undefined, this.stamp).then(held.resolve, held.reject);
    }
  }

  /** The fingerprint exchange failed: fail the held receives with its error. */
  failGated(error: unknown): void {
    for (const queue of this.gated.values()) for (const held of queue) held.reject(error);
    this.gated.clear();
  }

  /** Record the ranks a shared-memory barrier waits for (for the deadline's message). */
  waitFor(ranks: readonly number[]): void {
    this.waiting.clear();
    for (const rank of ranks) this.waiting.set(rank, 1);
  }

  private expire(): void {
    this.timer = null;
    if (this.heldMismatch !== null) {
      try {
        this.heldMismatch();
      } catch {
        // Raised: the group is aborted with the mismatch, which the op settles with.
      }
      return;
    }
    const waitingFor = [...this.waiting.keys()].sort((a, b) => a - b);
    const board = progressBoardOf(this.group.transport);
    if (board === null) {
      this.fail(waitingFor, null);
      return;
    }
    this.verdict = this.poll(board, waitingFor).catch(noop);
  }

  /** Asks every member where it is, then fails the group with the verdict. */
  private async poll(board: ProgressBoard, waitingFor: number[]): Promise<void> {
    const { ranks, tag, transport } = this.group;
    const members = ranks.filter((rank) => rank !== transport.rank);
    const reports = await board.poll(members, BLAME_WINDOW_MS);
    if (transport.abortReason !== null) return;
    if (reports === null) {
      this.fail(waitingFor, null);
      return;
    }
    if (!(reports instanceof Map)) {
      // The medium's host is silent ([Note: a silent store host]): it is blamed, and this rank
      // was merely waiting.
      const self = transport.rank;
      const blamed = [reports.host];
      this.fail(waitingFor, { kind: 'blame', blamed, waiting: [self], detail: reports.detail });
      return;
    }
    const verdict = judge(
      {
        op: this.fields.op,
        seq: this.fields.seq,
        tag,
        self: transport.rank,
        members: ranks,
        waitingFor: waitingFor.map((peer) => ranks[peer]!),
        collective: this.fields.op !== 'send' && this.fields.op !== 'recv',
        windowMs: BLAME_WINDOW_MS,
      },
      reports,
    );
    if (verdict.kind === 'adopt') transport.abort(verdict.reason);
    else this.fail(waitingFor, verdict);
  }

  /** Aborts the group with this rank's timeout, blaming the verdict's ranks (or `waitingFor`). */
  private fail(waitingFor: number[], verdict: Extract<Verdict, { kind: 'blame' }> | null): void {
    const who =
      waitingFor.length === 0
        ? 'while sending (the receivers are not draining)'
        : `waiting for ${ranksText(waitingFor)}`;
    const why = verdict === null ? '' : ` (${verdict.detail})`;
    const message = `timed out after ${this.timeoutMs} ms ${who}${why}`;
    const peers = waitingFor.map((peer) => this.group.ranks[peer]!);
    const blame =
      verdict === null ? {} : { blamed: [...verdict.blamed], waiting: [...verdict.waiting] };
    const reason: AbortReason = {
      kind: 'timeout',
      origin: this.group.transport.rank,
      op: this.fields.op,
      seq: this.fields.seq,
      peers,
      ...blame,
      message: `${this.fields.op} #${this.fields.seq} on rank ${this.fields.rank} ${message}`,
    };
    const peer = verdict === null ? waitingFor[0] : verdict.blamed[0];
    this.ownError = new CollectiveTimeoutError(
      { ...this.fields, peer },
      this.timeoutMs,
      waitingFor,
      message,
      { reason, ...blame },
    );
    this.group.transport.abort(reason);
  }

  finish(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.unsubscribe();
    this.untrack();
  }
}
