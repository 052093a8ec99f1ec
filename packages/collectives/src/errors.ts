import { WebshardError } from '@webshard/tensor-core';

/**
 * Why a group (and its transport) was aborted, as plain data: a transport carries it to the other
 * ranks (shared memory, a control frame on a socket), and every rank turns it back into the same
 * typed error with `errorFromAbortReason`. Keep it JSON-serializable.
 */
export interface AbortReason {
  /**
   * - `timeout`: a rank passed an op's deadline (`peers` lists the ranks it was still waiting for).
   * - `mismatch`: ranks called different collectives (`detail` has both fingerprints).
   * - `peer-lost`: a rank died or its connection closed (`peer` is that rank).
   * - `user`: `ProcessGroup.abort()` was called.
   * - `error`: anything else (a protocol violation, an exception in a worker).
   */
  readonly kind: 'timeout' | 'mismatch' | 'peer-lost' | 'user' | 'error';
  /** The global rank that raised the abort. */
  readonly origin: number;
  /** The full message of the error that caused it, as the origin rank saw it. */
  readonly message: string;
  /** The op that was running on the origin rank, if any (`allReduce`, `barrier`, ...). */
  readonly op?: string;
  /** That op's sequence number in its group. */
  readonly seq?: number;
  /** The transport tag of that op's group (added after the first version; optional). */
  readonly tag?: number;
  /** The rank that is dead or was waited for (`peer-lost`, point-to-point). */
  readonly peer?: number;
  /** Ranks the origin was still waiting for (`timeout`). */
  readonly peers?: readonly number[];
  /**
   * `timeout`: the global ranks blamed for it, the ones that never reached or never finished the op
   * ([Note: blaming a stalled rank]); absent when the deadline could not poll its peers (then the
   * ranks in `peers` are blamed).
   */
  readonly blamed?: readonly number[];
  /** `timeout`: the global ranks that answered the poll and were merely waiting. */
  readonly waiting?: readonly number[];
}

/** Where and when a collective failed: the op, the rank that reports it, the op's sequence number. */
export interface CollectiveErrorFields {
  readonly op: string;
  readonly rank: number;
  readonly seq: number;
  readonly peer?: number;
}

/**
 * A collective that failed. `op` is the collective (`allReduce`...), `rank` the group rank that
 * reports it, `seq` the op's sequence number in its group (ops are numbered from 0 in issue order),
 * `peer` the other rank involved when there is one (a dead rank, the sender of a mismatched call).
 * Messages begin with the op: `[allReduce] rank 2 (seq 7): ...`.
 */
export class CollectiveError extends WebshardError {
  readonly op: string;
  readonly rank: number;
  readonly seq: number;
  readonly peer: number | undefined;
  /** The abort reason shared by the group, when the error came from an abort. */
  readonly reason: AbortReason | undefined;

  constructor(
    fields: CollectiveErrorFields,
    detail: string,
    options: { code?: string; cause?: unknown; reason?: AbortReason } = {},
  ) {
    super(`[${fields.op}] rank ${fields.rank} (seq ${fields.seq}): ${detail}`, {
      code: options.code ?? 'E_COLLECTIVE',
      cause: options.cause,
    });
    this.op = fields.op;
    this.rank = fields.rank;
    this.seq = fields.seq;
    this.peer = fields.peer;
    this.reason = options.reason;
  }
}

/**
 * An op passed its deadline. `waitingFor` lists the ranks whose messages never came (to the rank
 * whose deadline passed); `blamed` the world ranks that never reached or never finished the op,
 * `waiting` those that were merely waiting for them ([Note: blaming a stalled rank]). `peer` is
 * the first blamed rank.
 */
export class CollectiveTimeoutError extends CollectiveError {
  readonly timeoutMs: number;
  readonly waitingFor: readonly number[];
  readonly blamed: readonly number[];
  readonly waiting: readonly number[];
  constructor(
    fields: CollectiveErrorFields,
    timeoutMs: number,
    waitingFor: readonly number[],
    detail: string,
    options: { reason?: AbortReason; blamed?: readonly number[]; waiting?: readonly number[] } = {},
  ) {
    super(fields, detail, { code: 'E_COLLECTIVE_TIMEOUT', reason: options.reason });
    this.timeoutMs = timeoutMs;
    this.waitingFor = waitingFor;
    this.blamed = options.blamed ?? waitingFor;
    this.waiting = options.waiting ?? [];
  }
}

/** The identity of one collective call, compared across ranks before any data moves. */
export interface Fingerprint {
  readonly op: string;
  readonly seq: number;
  readonly dtype: string;
  readonly count: number;
  /** The reduce op, the root, or the peer: whatever else must agree. */
  readonly extra: number;
}

/** Ranks called different collectives (op, dtype, element count, reduce op or root differ). */
export class CollectiveMismatchError extends CollectiveError {
  constructor(
    fields: CollectiveErrorFields,
    detail: string,
    options: { reason?: AbortReason } = {},
  ) {
    super(fields, detail, { code: 'E_COLLECTIVE_MISMATCH', ...options });
  }
}

/** A rank died (its worker exited, its connection closed) while the group was in use. */
export class PeerLostError extends CollectiveError {
  constructor(
    fields: CollectiveErrorFields,
    detail: string,
    options: { reason?: AbortReason } = {},
  ) {
    super(fields, detail, { code: 'E_PEER_LOST', ...options });
  }
}

/**
 * The group was aborted earlier (by a failure or `abort()`); it refuses every further call. `reason`
 * says why.
 */
export class GroupAbortedError extends CollectiveError {
  constructor(
    fields: CollectiveErrorFields,
    detail: string,
    options: { reason?: AbortReason } = {},
  ) {
    super(fields, detail, { code: 'E_GROUP_ABORTED', ...options });
  }
}

/**
 * What a transport rejects pending and later operations with once it is aborted (by itself on a
 * dead peer, by `abort()`, or by a peer's abort). The process group converts it to the typed
 * collective error with `errorFromAbortReason`.
 */
export class TransportAbortedError extends WebshardError {
  readonly reason: AbortReason;
  constructor(reason: AbortReason) {
    super(`[transport] aborted by rank ${reason.origin} (${reason.kind}): ${reason.message}`, {
      code: 'E_TRANSPORT_ABORTED',
    });
    this.reason = reason;
  }
}

/**
 * The typed error a rank raises for an abort reason, for the op it was running (`fields`). The
 * same reason gives the same error class on every rank: a mismatch detected by rank 1 is a
 * `CollectiveMismatchError` on rank 3 too.
 */
export function errorFromAbortReason(
  fields: CollectiveErrorFields,
  reason: AbortReason,
): CollectiveError {
  const from = reason.origin === fields.rank ? '' : ` (reported by rank ${reason.origin})`;
  switch (reason.kind) {
    case 'timeout':
      return new CollectiveTimeoutError(
        { ...fields, peer: fields.peer ?? reason.blamed?.[0] ?? reason.peer },
        0,
        reason.peers ?? [],
        `${reason.message}${from}`,
        {
          reason,
          ...(reason.blamed === undefined ? {} : { blamed: reason.blamed }),
          ...(reason.waiting === undefined ? {} : { waiting: reason.waiting }),
        },
      );
    case 'mismatch':
      return new CollectiveMismatchError(fields, `${reason.message}${from}`, { reason });
    case 'peer-lost':
      return new PeerLostError({ ...fields, peer: reason.peer }, `${reason.message}${from}`, {
        reason,
      });
    default:
      // A protocol violation or a passed budget names the peer at fault.
      return new GroupAbortedError(
        reason.kind === 'error' && reason.peer !== undefined && fields.peer === undefined
          ? { ...fields, peer: reason.peer }
          : fields,
        `group aborted: ${reason.message}${from}`,
        { reason },
      );
  }
}

/**
 * Registered memory (`ProcessGroup.allocate`) that could not be had: past the world's
 * `registeredBytes`, or refused by the system. Raised where the buffer is allocated (FSDP's flat
 * parameters and DDP's buckets are allocated before the first step), with what to do.
 */
export class RegisteredMemoryError extends WebshardError {
  /** Always `allocate`. */
  readonly op = 'allocate';
  /** The rank that allocated. */
  readonly rank: number;
  /** Bytes asked for (rounded up to 64). */
  readonly requested: number;
  /** Bytes of registered memory the world had committed. */
  readonly committed: number;
  /** The world's `registeredBytes`. */
  readonly limit: number;
  constructor(rank: number, requested: number, committed: number, limit: number, why: string) {
    super(
      `[allocate] rank ${rank}: ${requested} bytes of registered memory cannot be had: ${why} (${committed} bytes committed by the world). Raise the shm handle's registeredBytes (launcher option shm.registeredBytes), run fewer ranks on this machine, shard further (FSDP) or use --transport tcp`,
      { code: 'E_REGISTERED_OOM' },
    );
    this.rank = rank;
    this.requested = requested;
    this.committed = committed;
    this.limit = limit;
  }
}
