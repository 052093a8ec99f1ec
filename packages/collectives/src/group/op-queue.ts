import { keep, Tensor } from '@webshard/tensor-core';
import {
  type CollectiveErrorFields,
  CollectiveError,
  errorFromAbortReason,
  TransportAbortedError,
} from '../errors.js';
import type { OperandInfo } from '../operand.js';
import type { FingerprintExchange, FingerprintInit } from './fingerprint.js';
import { type GroupView, OpContext } from './op-context.js';
import { Work } from './work.js';

const noop = () => {};

/**
 * How long an op's body gets to finish once its transport aborted, before the backstop settles
 * the op with the abort ([Note: an abort does not undo a finished op]). Bodies on a transport that
 * keeps its contract settle within a few milliseconds of the abort (their waits reject at once),
 * so this only delays the backstop's error where a wait never settles.
 */
export const ABORT_GRACE_MS = 1000;

/** Whether `body` resolves within `ms` (false if it rejects or takes longer). */
function resolvesWithin(body: Promise<void>, ms: number): Promise<boolean> {
  return new Promise((done) => {
    const timer = setTimeout(() => done(false), ms);
    const settle = (resolved: boolean) => {
      clearTimeout(timer);
      done(resolved);
    };
    body.then(
      () => settle(true),
      () => settle(false),
    );
  });
}

/**
 * [Note: an abort does not undo a finished op]
 * The backstop of [Note: ordering, deadlines and abort] settles an op when its transport aborts,
 * whatever its body waits for. But an abort can reach a rank that is behind while the last thing
 * its op waited for has already happened: the faster ranks finished op k and one of them failed
 * after it (`abort()` over its own error, a peer lost, a deadline). In a two-level world it reaches
 * a lagging rank by one medium (another node's socket, its node's shm abort word) while the shm
 * barrier that ends op k (every node-mate arrived) wakes it a moment later: the abort listener ran
 * before the body's continuation, and op k, complete on every rank, failed on this one. The
 * two-level suite's failure scenarios lost a rank's report that way (its first op failed, with a
 * mismatch of op #1 found before [Note: a mismatch waits for every fingerprint]; the body resolved
 * 0.6 ms after the abort). So when the abort wins the race, the body gets `ABORT_GRACE_MS` to
 * finish: a body whose waits were all satisfied completes and so does the op (the next call then
 * fails with the abort, as on every other rank); one whose waits reject (a transport keeping rule 5
 * of its contract rejects them at once) or never settle fails as before. An op whose own deadline
 * aborted the group fails in any case. Data a peer sent before the abort reached it, still unread
 * when the abort came over another connection, is read first on tcp and ws
 * ([Note: draining after an abort] in transports/framed/framed-transport.ts); shm and local reject
 * that receive.
 */
async function finishedOrAborted(body: Promise<void>, ctx: OpContext): Promise<void> {
  body.catch(noop);
  try {
    await Promise.race([body, ctx.aborted]);
  } catch (error) {
    if (ctx.ownError !== null) throw error;
    if (!(await resolvesWithin(body, ABORT_GRACE_MS)) || ctx.ownError !== null) throw error;
  }
}

/**
 * The order of one group's calls: sequence numbers, one op after another, each under its own
 * `OpContext` (deadline, abort), fingerprint first, errors turned into the group's typed errors.
 *
 * [Note: ordering, deadlines and abort]
 * Ordering: every call gets the next sequence number of its group when it is made, and runs only
 * after the group's previous call has finished, so calls complete in issue order and the ranks'
 * k-th calls meet each other. Each op first sends a fingerprint (op, sequence number, dtype,
 * element count, reduce op or root) to every other rank of the group (24 bytes each), and accepts
 * no data from a peer before that peer's fingerprint has matched (see [Note: fingerprints ahead of
 * the data]). A rank whose fingerprints differ from a peer's aborts the transport with a
 * `mismatch` reason naming both calls, once every peer's fingerprint is in ([Note: a mismatch
 * waits for every fingerprint]); every rank of the group then fails with
 * `CollectiveMismatchError` before any payload with a wrong size could be received. Every message
 * of the op, fingerprint included, is stamped with the op, and the receive it meets checks the
 * stamp, so a message of another op never passes as data ([Note: op stamps]). The all-to-all
 * fingerprint is also the barrier, and it tells a timed-out barrier exactly which ranks never
 * arrived. Deadlines: each op arms a timer when it starts; when it fires, the rank aborts the
 * transport with a `timeout` reason listing the ranks it was still waiting for. Abort: a transport
 * abort (deadline, mismatch, dead peer, `abort()`) reaches every rank of the transport, and each
 * pending op turns the shared reason into the same typed error (`errorFromAbortReason`). The
 * failure is final for every group on the transport (as NCCL aborts a communicator): later calls
 * reject with `GroupAbortedError`. The backstop: a pending op settles when the transport aborts,
 * even if its body still waits on a send or receive that the transport failed to reject (a
 * transport bug, or a user buffer the body is stuck on), so no op outlives its deadline; a body
 * left running after that only touches a transport that refuses all further use. One failure
 * poisoning all groups is deliberate: after a failed collective the ranks no longer agree on what
 * has been exchanged, and only a fresh start is safe.
 */
export class OpQueue {
  /** Tensors pinned by the call being issued, handed to its work by `schedule`. */
  private readonly pinned: Tensor[] = [];
  private seq = 0;
  /** Point-to-point sequence numbers per peer, one counter per direction: `send` to / `recv` from. */
  private readonly p2pSeq = { send: new Map<number, number>(), recv: new Map<number, number>() };
  private tail: Promise<unknown> = Promise.resolve();

  /**
   * `assertUsable` throws the error a call gets when the group can no longer run it (closed or
   * aborted); it runs when the op's turn comes.
   */
  constructor(
    private readonly group: GroupView,
    private readonly fingerprints: FingerprintExchange,
    private readonly defaultTimeoutMs: number,
    private readonly assertUsable: (fields: CollectiveErrorFields) => void,
    /** Called as each op settles (the group recycles its operand staging then). */
    private readonly onSettled: () => void = () => {},
  ) {}

  /** Settles once every op issued so far has settled. */
  drained(): Promise<unknown> {
    return this.tail;
  }

  /**
   * [Note: operands are held until the op settles]
   * A collective reads its operands when it runs, which may be after calls issued before it on
   * the group (ops run in issue order), as in PyTorch: do not write an input or read an output
   * before the op's `wait()`. What is guaranteed is that the memory stays: a tensor operand is
   * pinned at the call (a second handle on its storage, like PyTorch's `record_stream`), so a
   * `free()` of the caller's tensor before the op settles only drops the caller's handle, and the
   * storage goes back to its allocator once the op has settled. Host arrays are the caller's.
   */
  pin(info: OperandInfo): OperandInfo {
    if (!(info.data instanceof Tensor)) return info;
    const alias = keep(info.data.detach());
    alias.name = info.data.name;
    this.pinned.push(alias);
    return { ...info, data: alias };
  }

  /** A collective over every rank of the group, with the group's next sequence number. */
  enqueue(
    fingerprint: FingerprintInit,
    timeoutMs: number | undefined,
    body: (ctx: OpContext) => Promise<void>,
  ): Work {
    const seq = this.seq++;
    const { rank, size } = this.group;
    const peers = Array.from({ length: size }, (_, i) => i).filter((r) => r !== rank);
    return this.schedule(fingerprint.op, seq, peers, peers, fingerprint, timeoutMs, body);
  }

  /** A send or receive, numbered per peer and direction. */
  enqueuePeer(
    op: 'send' | 'recv',
    peer: number,
    info: OperandInfo,
    timeoutMs: number | undefined,
    body: (ctx: OpContext) => Promise<void>,
  ): Work {
    const counters = this.p2pSeq[op];
    const seq = counters.get(peer) ?? 0;
    counters.set(peer, seq + 1);
    const fingerprint: FingerprintInit = { op, dtype: info.dtype, count: info.count, extra: 0 };
    const sendTo = op === 'send' ? [peer] : [];
    const recvFrom = op === 'recv' ? [peer] : [];
    return this.schedule(op, seq, sendTo, recvFrom, fingerprint, timeoutMs, body);
  }

  private schedule(
    op: string,
    seq: number,
    sendTo: readonly number[],
    recvFrom: readonly number[],
    fingerprint: FingerprintInit,
    opTimeoutMs: number | undefined,
    body: (ctx: OpContext) => Promise<void>,
  ): Work {
    const fields: CollectiveErrorFields = { op, rank: this.group.rank, seq };
    const timeoutMs = opTimeoutMs ?? this.defaultTimeoutMs;
    // The tensors pinned by this call ([Note: operands are held until the op settles]).
    const pinned = this.pinned.splice(0);
    const run = async () => {
      this.assertUsable(fields);
      const ctx = new OpContext(this.group, fields, timeoutMs);
      const exchange = async () => {
        if (this.fingerprints.isShared(fingerprint)) {
          await this.fingerprints.exchange(ctx, seq, sendTo, recvFrom, fingerprint);
          await body(ctx);
        } else {
          // See [Note: fingerprints ahead of the data].
          await Promise.all([
            this.fingerprints.exchange(ctx, seq, sendTo, recvFrom, fingerprint),
            body(ctx),
          ]);
        }
      };
      try {
        await finishedOrAborted(exchange(), ctx);
        // A deadline that passed stays firm ([Note: blaming a stalled rank]).
        await ctx.afterDeadline();
      } catch (error) {
        throw this.translate(error, ctx);
      } finally {
        ctx.finish();
      }
    };
    const promise = this.tail.then(run);
    this.tail = promise.catch(noop);
    const unpin = () => {
      for (const t of pinned) t.free();
      this.onSettled();
    };
    promise.then(unpin, unpin);
    return new Work(op, seq, promise);
  }

  private translate(error: unknown, ctx: OpContext): unknown {
    if (ctx.ownError !== null) return ctx.ownError;
    if (error instanceof TransportAbortedError)
      return errorFromAbortReason(ctx.fields, error.reason);
    if (CollectiveError.isInstance(error)) return error;
    // Anything else (a bug, a tensor freed mid-op) leaves the ranks out of step: abort them all.
    const message = error instanceof Error ? error.message : String(error);
    const { transport } = this.group;
    transport.abort({
      kind: 'error',
      origin: transport.rank,
      op: ctx.fields.op,
      seq: ctx.fields.seq,
      message: `${ctx.fields.op} #${ctx.fields.seq} failed on rank ${ctx.fields.rank}: ${message}`,
    });
    return error;
  }
}
