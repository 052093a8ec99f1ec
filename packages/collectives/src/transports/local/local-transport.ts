import { ProcessGroup, type ProcessGroupOptions } from '../../process-group.js';
import { type AbortReason, TransportAbortedError } from '../../errors.js';
import type { OpStamp } from '../../op-stamp.js';
import { AbortState, type Transport } from '../../transport-contract.js';
import { Mailbox } from '../mailbox.js';
import { MemoryProgressHub } from '../../progress/memory-progress-board.js';
import { attachProgressBoard, progressReportOf } from '../../progress/progress.js';

/**
 * The shared state of N local ranks: their mailboxes and one abort state. An abort on any rank is
 * an abort of all (rule 5 of the transport contract, with nothing to serialize).
 */
export class LocalHub {
  readonly transports: LocalTransport[] = [];
  readonly abortState = new AbortState();

  constructor(readonly size: number) {
    for (let rank = 0; rank < size; rank++) this.transports.push(new LocalTransport(this, rank));
    this.abortState.on((reason) => {
      for (const transport of this.transports) transport.mailbox.abort(reason);
    });
  }

  /**
   * Simulate the death of `rank` (for failure tests): the other ranks see a `peer-lost` abort, as
   * a real transport reports a dead peer, and `rank`'s own pending ops fail too.
   */
  kill(rank: number): void {
    const observer = rank === 0 ? Math.min(1, this.size - 1) : 0;
    this.abortState.trigger({
      kind: 'peer-lost',
      origin: observer,
      peer: rank,
      message: `rank ${rank} is gone (killed)`,
    });
  }
}

/** One rank of a `LocalHub`: messages are copied straight into the receiver's posted buffer. */
export class LocalTransport implements Transport {
  readonly kind = 'local';
  readonly size: number;
  readonly mailbox: Mailbox;

  constructor(
    private readonly hub: LocalHub,
    readonly rank: number,
  ) {
    this.size = hub.size;
    this.mailbox = new Mailbox(rank, (reason) => this.abort(reason));
  }

  get abortReason(): AbortReason | null {
    return this.hub.abortState.reason;
  }

  send(peer: number, tag: number, data: Uint8Array, stamp?: OpStamp): Promise<void> {
    const reason = this.hub.abortState.reason;
    if (reason !== null) return Promise.reject(new TransportAbortedError(reason));
    const target = this.hub.transports[peer];
    if (target === undefined || peer === this.rank) {
      return Promise.reject(
        new TransportAbortedError({
          kind: 'error',
          origin: this.rank,
          message: `rank ${this.rank} cannot send to rank ${peer} of ${this.size}`,
        }),
      );
    }
    // The stamp travels as an argument: nothing to serialize ([Note: op stamps]).
    target.mailbox.deliver(this.rank, tag, data, stamp);
    return Promise.resolve();
  }

  /** Rule 11 of [Note: the transport contract]: the op's early messages are held outside the budget. */
  expect(peer: number, tag: number, stamp: OpStamp, bytes: number, messages: number): () => void {
    return this.mailbox.expect(peer, tag, stamp, bytes, messages);
  }

  recv(
    peer: number,
    tag: number,
    dst: Uint8Array,
    onArrive?: () => void,
    stamp?: OpStamp,
  ): Promise<void> {
    const reason = this.hub.abortState.reason;
    if (reason !== null) return Promise.reject(new TransportAbortedError(reason));
    return this.mailbox.recv(peer, tag, dst, onArrive, stamp);
  }

  abort(reason: AbortReason): void {
    this.hub.abortState.trigger(reason);
  }

  onAbort(listener: (reason: AbortReason) => void): () => void {
    return this.hub.abortState.on(listener);
  }

  async close(): Promise<void> {
    this.mailbox.abort({ kind: 'user', origin: this.rank, message: 'transport closed' });
  }
}

/**
 * N transports over one in-process hub, rank i at index i, with in-process progress boards for
 * their deadlines ([Note: blaming a stalled rank]).
 */
export function createLocalTransports(size: number): LocalTransport[] {
  const { transports } = new LocalHub(size);
  const progress = new MemoryProgressHub();
  for (const transport of transports) {
    attachProgressBoard(
      transport,
      progress.board(transport.rank, () => progressReportOf(transport)),
    );
  }
  return transports;
}

/**
 * `size` process groups in this thread, one per rank, over a fresh local hub (tests, and
 * single-process multi-rank runs). Drive them concurrently: `Promise.all(groups.map(...))`.
 */
export function createLocalGroups(size: number, options: ProcessGroupOptions = {}): ProcessGroup[] {
  return createLocalTransports(size).map((transport) =>
    ProcessGroup.fromTransport(transport, options),
  );
}
