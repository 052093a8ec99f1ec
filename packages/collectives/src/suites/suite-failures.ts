import type { ProcessGroup } from '../process-group.js';
import type { ErrorReport, FailureScenario, RankReport, SuiteEnvironment } from './suite.js';
import { errorReport } from './suite-reference.js';

// The `failure` jobs of the collective suite ([Note: one suite for every transport] in suite.ts):
// each scenario makes one op fail on purpose (a mismatch, a stall, a death) and reports the errors.

async function capture(work: () => Promise<unknown>): Promise<ErrorReport | null> {
  try {
    await work();
    return null;
  } catch (error) {
    return errorReport(error);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The deadline failure scenarios use. */
export const FAILURE_TIMEOUT_MS = 300;

/**
 * How long a stalled rank stays away at most: it returns as soon as its group is aborted, so a
 * working deadline ends the stall after about `FAILURE_TIMEOUT_MS`; a deadline that never fires
 * lets the stalled rank join after this long, and the op then succeeds (and the test fails).
 */
export const STALL_LIMIT_MS = 15_000;

/** Elements of the all-reduce a rank dies in the middle of (`kill-mid-ring`): 256 KiB of f32. */
const MID_RING_COUNT = 64 * 1024;
/** The dying rank dies once this many bytes of that all-reduce have reached it. */
const MID_RING_DIE_AFTER_BYTES = 16 * 1024;

/** Waits until `group` is aborted (by another rank's deadline) or `limitMs` have passed. */
async function stallUntilAborted(group: ProcessGroup, limitMs: number): Promise<void> {
  const until = Date.now() + limitMs;
  while (group.state === 'ready' && Date.now() < until) await sleep(5);
}

/**
 * Calls `die()` once `bytes` bytes of messages of `group` have been received by this rank: a
 * death that is certain to come after data started flowing. It watches the group's transport
 * (every message of a group goes through `transport.recv` with the group's tag).
 */
function dieAfterReceiving(group: ProcessGroup, bytes: number, die: () => void): void {
  const transport = group.transport;
  const recv = transport.recv.bind(transport);
  let received = 0;
  transport.recv = (peer, tag, dst, ...rest) => {
    const promise = recv(peer, tag, dst, ...rest);
    if (tag === group.tag) {
      void promise.then(
        () => {
          received += dst.byteLength;
          if (received >= bytes) {
            received = Number.NEGATIVE_INFINITY;
            die();
          }
        },
        () => {},
      );
    }
    return promise;
  };
}

export async function runFailure(
  group: ProcessGroup,
  scenario: FailureScenario,
  environment: SuiteEnvironment,
): Promise<RankReport> {
  const { rank, size } = group;
  const last = size - 1;
  const options = { timeoutMs: FAILURE_TIMEOUT_MS };
  // A first op with a long deadline: ranks that start at different times (workers, processes) meet.
  await group.allReduce(new Float32Array([1, 2, 3]), { timeoutMs: 30_000 }).wait();
  let error: ErrorReport | null = null;
  let elapsedMs: number | undefined;
  const timed = async (work: () => Promise<unknown>) => {
    const start = performance.now();
    error = await capture(work);
    elapsedMs = performance.now() - start;
  };
  switch (scenario) {
    case 'mismatch-op':
      await timed(() =>
        rank === 0
          ? group.broadcast(new Float32Array(8), 0, options).wait()
          : group.allReduce(new Float32Array(8), options).wait(),
      );
      break;
    case 'mismatch-dtype':
      await timed(() =>
        group.allReduce(rank === last ? new Int32Array(8) : new Float32Array(8), options).wait(),
      );
      break;
    case 'mismatch-count':
      await timed(() => group.allReduce(new Float32Array(rank === 0 ? 9 : 8), options).wait());
      break;
    case 'mismatch-reduce-op':
      await timed(() =>
        group
          .allReduce(new Float32Array(8), { ...options, op: rank === last ? 'max' : 'sum' })
          .wait(),
      );
      break;
    case 'mismatch-root':
      await timed(() =>
        group.broadcast(new Float32Array(8), rank === last ? last : 0, options).wait(),
      );
      break;
    case 'stall':
      if (rank === last) await stallUntilAborted(group, STALL_LIMIT_MS);
      await timed(() => group.allReduce(new Float32Array(4096), options).wait());
      break;
    case 'barrier-timeout':
      if (rank === last) await stallUntilAborted(group, STALL_LIMIT_MS);
      else await timed(() => group.barrier(options).wait());
      break;
    case 'kill':
    case 'kill-rank-0': {
      // The others are inside the all-reduce, waiting for the victim, when it dies.
      const victim = scenario === 'kill' ? last : 0;
      if (rank === victim) {
        // Long enough for the others to be inside the all-reduce on a loaded machine: a rank that
        // issued it only after the death got GroupAbortedError instead (a CI run at load ~20).
        await sleep(500);
        environment.die();
        await sleep(FAILURE_TIMEOUT_MS * 3);
      } else {
        await timed(() => group.allReduce(new Float32Array(4096), { timeoutMs: 20_000 }).wait());
      }
      break;
    }
    case 'kill-mid-ring': {
      // A sub-group of every rank: sub-groups always run on messages (shm's world group would
      // take the shared arena), so the op below is the segmented ring on every transport. The
      // last rank dies after 16 KiB of it reached it, with most of its 256 KiB still to come.
      const ring = group.newGroup(Array.from({ length: size }, (_, r) => r))!;
      if (rank === last) dieAfterReceiving(ring, MID_RING_DIE_AFTER_BYTES, () => environment.die());
      await timed(() =>
        ring.allReduce(new Float32Array(MID_RING_COUNT).fill(1), { timeoutMs: 20_000 }).wait(),
      );
      if (rank === last) await sleep(FAILURE_TIMEOUT_MS * 3);
      break;
    }
  }
  const afterError = await capture(() => group.barrier(options).wait());
  return { rank, cases: [], error, afterError, ...(elapsedMs === undefined ? {} : { elapsedMs }) };
}
