import { mulberry32 } from '@webshard/tensor-core';

/**
 * [Note: the fault-injection suite]
 * One seed makes one run: `planFault(seed, scope)` picks the world size (2 to 4), the transport
 * and where the ranks live (in this process, or as child processes), a random mix of collectives,
 * the faulty rank, the fault (kill, stop, close its sockets, throw inside an op, or kill while the
 * survivors leave as soon as they fail: `exit-after-detect`) and when it strikes (before the rank
 * calls the op, or once some bytes of the op have reached it: the first message, all the
 * fingerprints, or part of a ring). Every rank runs the plan (`runFaultRank`), the ops followed by
 * a final barrier, so a fault in an op that the survivors got through without the victim still
 * reaches every survivor. `judgeFaultRun` then
 * asks of every survivor: it failed, with the error type of the fault, naming the faulty rank
 * (`namedRanks`), within the op's deadline plus the blame window plus a margin; a run that passes
 * its hard limit is a hang. The seed of a run that fails is printed, and `WEBSHARD_FAULT_SEED=<seed>`
 * runs that one alone.
 */

/** How a rank fails. */
export const FAULT_KINDS = ['kill', 'stop', 'close-socket', 'throw', 'exit-after-detect'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** The ops a plan mixes; `ring` is an all-reduce large enough for the segmented ring. */
export const FAULT_OPS = [
  'allReduce',
  'ring',
  'allGather',
  'reduceScatter',
  'broadcast',
  'barrier',
] as const;
export type FaultOp = (typeof FAULT_OPS)[number];

/** A transport and where its ranks live. */
export type FaultWorld = 'local' | 'tcp' | 'ws' | 'tcp-processes' | 'ws-processes';

/** The faults each world can inject. */
export const FAULTS_OF: Record<FaultWorld, readonly FaultKind[]> = {
  // In one thread, a kill is the local hub's simulated death; there are no sockets to close.
  local: ['kill', 'stop', 'throw', 'exit-after-detect'],
  // Ranks in this process cannot die; their stop is a frozen transport and a silent board.
  tcp: ['stop', 'throw'],
  ws: ['stop', 'throw'],
  'tcp-processes': FAULT_KINDS,
  'ws-processes': FAULT_KINDS,
};

/** One run. */
export interface FaultPlan {
  readonly seed: number;
  readonly world: FaultWorld;
  readonly size: number;
  readonly ops: readonly FaultOp[];
  /** The root of every broadcast. */
  readonly root: number;
  readonly victim: number;
  readonly fault: FaultKind;
  /** The op (index into `ops`) the fault strikes in. */
  readonly at: number;
  /** 0: before the victim calls that op; else once this many bytes of it have reached it. */
  readonly afterBytes: number;
  /** Survivors close and leave as soon as they fail (as a real job's ranks do). */
  readonly leave: boolean;
  /** The deadline of every op after the first. */
  readonly timeoutMs: number;
}

/** Elements of the ops of a plan. */
export const FAULT_COUNT = 4096;
export const RING_COUNT = 16 * 1024;

/** The plan of `seed`, in one of `worlds`. */
export function planFault(seed: number, worlds: readonly FaultWorld[]): FaultPlan {
  // tensor-core's mulberry32, as the shared suite: a run reproduces from its seed.
  const random = mulberry32(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const world = pick(worlds);
  const size = 2 + Math.floor(random() * 3);
  const ops = Array.from({ length: 1 + Math.floor(random() * 4) }, () => pick(FAULT_OPS));
  const fault = pick(FAULTS_OF[world]);
  // Never in the final barrier: a victim that strikes after its fingerprint left may let the
  // others through it. Struck in an earlier op, the victim never reaches the final barrier.
  const at = Math.floor(random() * ops.length);
  const op = ops[at]!;
  const fingerprints = 24 * (size - 1);
  const after = [1, fingerprints, ...(op === 'ring' ? [16 * 1024] : [])];
  // A throw happens inside an op: it needs a message to throw on.
  const afterBytes = fault === 'throw' ? pick(after) : pick([0, ...after]);
  const processes = world.endsWith('-processes');
  return {
    seed,
    world,
    size,
    ops,
    root: Math.floor(random() * size),
    victim: Math.floor(random() * size),
    fault,
    at,
    afterBytes,
    leave: fault === 'exit-after-detect' || random() < 0.3,
    timeoutMs: processes ? 1000 : 400,
  };
}

/** An error as a rank reports it. */
export interface FaultErrorReport {
  readonly name: string;
  readonly message: string;
  readonly op?: string;
  readonly seq?: number;
  readonly peer?: number;
  readonly blamed?: readonly number[];
  readonly waiting?: readonly number[];
  /** The abort reason's kind, origin, waited-for, dead and blamed ranks, when it came from one. */
  readonly kind?: string;
  readonly origin?: number;
  readonly peers?: readonly number[];
  readonly reasonPeer?: number;
  readonly reasonBlamed?: readonly number[];
}

/** A rank's outcome: its first error (null when every op succeeded). */
export interface FaultRankReport {
  readonly rank: number;
  readonly error: FaultErrorReport | null;
  /** Milliseconds from issuing the op that failed to its error. */
  readonly elapsedMs: number;
  /** The op that failed (index, `ops.length` for the final barrier), or -1. */
  readonly failedAt: number;
}

/** The error type a survivor must see for each fault. */
export const EXPECTED_ERROR: Record<FaultKind, string> = {
  kill: 'PeerLostError',
  'exit-after-detect': 'PeerLostError',
  'close-socket': 'PeerLostError',
  stop: 'CollectiveTimeoutError',
  throw: 'GroupAbortedError',
};

/** The abort reason kind each fault leads to. */
const EXPECTED_REASON: Record<FaultKind, string> = {
  kill: 'peer-lost',
  'exit-after-detect': 'peer-lost',
  'close-socket': 'peer-lost',
  stop: 'timeout',
  throw: 'error',
};

/**
 * Whether `error` is the one a survivor may see for `fault`: its type, or `GroupAbortedError`
 * with the fault's reason (a survivor that was between two ops when the group aborted gets that,
 * as every later call does).
 */
export function expectedError(fault: FaultKind, error: FaultErrorReport): boolean {
  if (error.name === EXPECTED_ERROR[fault]) return true;
  return error.name === 'GroupAbortedError' && error.kind === EXPECTED_REASON[fault];
}

/** The ranks an error blames: the dead peer, the blamed ranks of a timeout, a thrower. */
export function namedRanks(error: FaultErrorReport): readonly number[] {
  switch (error.name) {
    case 'PeerLostError':
      return error.peer === undefined ? [] : [error.peer];
    case 'CollectiveTimeoutError':
      return error.blamed ?? [];
    case 'GroupAbortedError':
      if (error.kind === 'error' && error.origin !== undefined) return [error.origin];
      if (error.kind === 'peer-lost' && error.reasonPeer !== undefined) return [error.reasonPeer];
      if (error.kind === 'timeout') return error.reasonBlamed ?? error.peers ?? [];
      return [];
    default:
      return [];
  }
}

/** How one run ended. */
export type FaultOutcome = 'right' | 'wrong-blame' | 'wrong-error' | 'slow' | 'hang';

/** Slack on top of the deadline and the blame window for a survivor's error (loaded machines). */
export const FAULT_MARGIN_MS = 1500;

/** The outcome of a run, with the evidence when it is not `right`. */
export function judgeFaultRun(
  plan: FaultPlan,
  reports: readonly (FaultRankReport | null)[] | 'hang',
  windowMs: number,
): { outcome: FaultOutcome; detail: string } {
  if (reports === 'hang') return { outcome: 'hang', detail: 'the run passed its hard limit' };
  const limit = plan.timeoutMs + windowMs + FAULT_MARGIN_MS;
  let outcome: FaultOutcome = 'right';
  const details: string[] = [];
  for (let rank = 0; rank < plan.size; rank++) {
    if (rank === plan.victim) continue;
    const report = reports[rank];
    const error = report?.error ?? null;
    const seen = `rank ${rank}: ${error === null ? 'no error' : `${error.name}: ${error.message}`}`;
    if (report === null || report === undefined || error === null) {
      outcome = 'wrong-error';
      details.push(report ? seen : `rank ${rank}: no report`);
    } else if (!expectedError(plan.fault, error)) {
      if (outcome === 'right') outcome = 'wrong-error';
      details.push(seen);
    } else if (namedRanks(error).join() !== String(plan.victim)) {
      outcome = 'wrong-blame';
      details.push(`${seen} (names ${namedRanks(error).join(', ') || 'nobody'})`);
    } else if (report.elapsedMs > limit) {
      if (outcome === 'right') outcome = 'slow';
      details.push(`${seen} after ${Math.round(report.elapsedMs)} ms (limit ${limit} ms)`);
    }
  }
  return { outcome, detail: details.join('\n') };
}
