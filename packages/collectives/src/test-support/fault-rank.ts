import { CollectiveError, CollectiveTimeoutError } from '../errors.js';
import type { ProcessGroup } from '../process-group.js';
import { shardRange } from '../shard.js';
import {
  FAULT_COUNT,
  type FaultErrorReport,
  type FaultOp,
  type FaultPlan,
  type FaultRankReport,
  RING_COUNT,
} from './fault-plan.js';

/** How the faults reach a rank where it lives (a child process, or this process). */
export interface FaultEnvironment {
  /** Die now (a child: SIGKILL; the local hub: a simulated death). */
  kill(): void;
  /** Stop now (a child: SIGSTOP; in this process: a frozen transport that answers no poll). */
  stop(): void;
  /** Drop every connection without a word, and stay (child processes only). */
  closeSockets(): void;
}

/** The group options of a plan's ranks: small segments, so the ring paths run. */
export function faultGroupOptions(plan: FaultPlan) {
  return { timeoutMs: plan.timeoutMs, segmentBytes: 4096, smallMessageBytes: 1024 };
}

function describe(error: unknown): FaultErrorReport {
  if (!CollectiveError.isInstance(error)) {
    return { name: (error as Error)?.name ?? 'Error', message: String((error as Error)?.message) };
  }
  const reason = error.reason;
  const timeout = error instanceof CollectiveTimeoutError ? error : null;
  return {
    name: error.name,
    message: error.message,
    op: error.op,
    seq: error.seq,
    ...(error.peer === undefined ? {} : { peer: error.peer }),
    ...(timeout === null ? {} : { blamed: [...timeout.blamed], waiting: [...timeout.waiting] }),
    ...(reason === undefined
      ? {}
      : {
          kind: reason.kind,
          origin: reason.origin,
          peers: [...(reason.peers ?? [])],
          ...(reason.peer === undefined ? {} : { reasonPeer: reason.peer }),
          ...(reason.blamed === undefined ? {} : { reasonBlamed: [...reason.blamed] }),
        }),
  };
}

/** Runs one op of a plan on this rank; an all-reduce checks its sum. */
async function runOp(group: ProcessGroup, op: FaultOp, plan: FaultPlan): Promise<void> {
  const { rank, size } = group;
  const shard = shardRange(FAULT_COUNT, size, rank);
  switch (op) {
    case 'allReduce':
    case 'ring': {
      const data = new Float32Array(op === 'ring' ? RING_COUNT : 8).fill(rank + 1);
      await group.allReduce(data).wait();
      const expected = (size * (size + 1)) / 2;
      if (data[0] !== expected) throw new Error(`allReduce gave ${data[0]}, not ${expected}`);
      return;
    }
    case 'allGather':
      await group.allGather(new Float32Array(shard.count), new Float32Array(FAULT_COUNT)).wait();
      return;
    case 'reduceScatter':
      await group
        .reduceScatter(new Float32Array(FAULT_COUNT), new Float32Array(shard.count))
        .wait();
      return;
    case 'broadcast':
      await group.broadcast(new Float32Array(FAULT_COUNT), plan.root).wait();
      return;
    case 'barrier':
      await group.barrier().wait();
  }
}

/**
 * Makes the fault strike once `bytes` bytes of the group's messages have reached this rank from
 * now on: `strike` runs then, or (a throw) the receive that crossed the line rejects with a plain
 * error, as a bug inside the op would.
 */
function armTrigger(group: ProcessGroup, bytes: number, strike: (() => void) | 'throw'): void {
  const transport = group.transport;
  const recv = transport.recv.bind(transport);
  let received = 0;
  let fired = false;
  transport.recv = (peer, tag, dst, ...rest) => {
    // The arrival hint and the op stamp pass on ([Note: op stamps]).
    const promise = recv(peer, tag, dst, ...rest);
    if (tag !== group.tag || fired) return promise;
    return promise.then(() => {
      received += dst.byteLength;
      if (fired || received < bytes) return;
      fired = true;
      if (strike === 'throw') throw new Error(`injected fault on rank ${transport.rank}`);
      strike();
    });
  };
}

/** How long a victim striking between ops waits for its last sends to be read. */
const BETWEEN_OPS_GRACE_MS = 300;

/**
 * One rank's part of a plan ([Note: the fault-injection suite]): a first all-reduce with a long
 * deadline (ranks that start at different times meet), the plan's ops, a final barrier. Resolves
 * with the rank's first error, or null for a victim that was killed, stopped or cut off (it has
 * nothing to report).
 */
export async function runFaultRank(
  group: ProcessGroup,
  plan: FaultPlan,
  environment: FaultEnvironment,
): Promise<FaultRankReport | null> {
  const { rank } = group;
  let abandon!: (value: 'abandoned') => void;
  const abandoned = new Promise<'abandoned'>((resolve) => {
    abandon = resolve;
  });
  const strike = () => {
    if (plan.fault === 'stop') environment.stop();
    else if (plan.fault === 'close-socket') environment.closeSockets();
    else environment.kill();
    abandon('abandoned');
  };
  await group.allReduce(new Float32Array(4), { timeoutMs: 30_000 }).wait();
  const ops: FaultOp[] = [...plan.ops, 'barrier'];
  for (let i = 0; i < ops.length; i++) {
    if (rank === plan.victim && i === plan.at) {
      if (plan.afterBytes === 0) {
        // A strike between ops that closes sockets (kill, close-socket) waits a moment first: the
        // victim's op resolves once its last sends are in the kernel, and a socket closed with
        // bytes still unread by the peer can be reset before they arrive, cutting the previous op
        // on a survivor, outside what the plan measures (seed 9184555, at load 15).
        if (plan.fault === 'kill' || plan.fault === 'close-socket') {
          await new Promise((resolve) => setTimeout(resolve, BETWEEN_OPS_GRACE_MS));
        }
        strike();
        return null;
      }
      armTrigger(group, plan.afterBytes, plan.fault === 'throw' ? 'throw' : strike);
    }
    const start = performance.now();
    try {
      if ((await Promise.race([runOp(group, ops[i]!, plan), abandoned])) === 'abandoned') {
        return null;
      }
    } catch (error) {
      return { rank, error: describe(error), elapsedMs: performance.now() - start, failedAt: i };
    }
  }
  return { rank, error: null, elapsedMs: 0, failedAt: -1 };
}
