import type { AbortReason } from '../errors.js';
import type { ProgressReport } from '../progress/progress.js';

/**
 * [Note: blaming a stalled rank]
 * A deadline alone cannot tell a stalled rank from the neighbour waiting on it: in a ring, when
 * rank 2 stops (SIGSTOP, a hung kernel, a thread blocked in `Atomics.wait`), rank 1 waits for
 * rank 2 and rank 0 waits for rank 1, and whichever deadline fires first used to name the rank it
 * waited for, often the healthy rank 1 (#20 item 3: the stopped rank was named in 1 run of 6). So
 * a rank whose deadline passes does not abort at once. It polls every rank of the group for a
 * progress report (`ProgressBoard.poll`) over a path that survives a stalled data path (the
 * rendezvous store for `tcp` and `ws`; in-process and shared-memory boards elsewhere), and waits
 * at most `BLAME_WINDOW_MS` for the answers. Each rank answers from its own event loop with the
 * ops it is running, the peers each waits for, and the highest sequence number each of its groups
 * has started (`ProgressTracker`). Then, as PyTorch's desync report does:
 *
 * - a rank that did not answer is blamed: it is stopped or hung (its silence is the evidence, as
 *   it cannot publish anything itself);
 * - a rank that answered but never started the op (its group's last op is older, and it is not
 *   inside an earlier op of the group) is blamed: it never called the collective, or is stuck
 *   elsewhere (its report says where);
 * - a rank inside the op, or inside an earlier op of the group, was merely waiting;
 * - a rank that answered with an abort reason had already seen the failure: its reason is adopted,
 *   so every rank names the rank that rank named;
 * - when nobody is blamed (every rank reached the op), the ranks this rank waited for are, as
 *   before.
 *
 * The verdict is the deadline's abort reason (`blamed` and `waiting` in world ranks, the message
 * naming both), which reaches every rank as any abort does; a rank whose own poll was still
 * running takes the first reason that arrives. The op fails even when its data arrives during the
 * poll: the deadline stays firm, the poll only delays the error by at most the window (and not at
 * all when every rank answers at once). Without a board (`createLocalGroups`, a transport made by
 * hand) a deadline blames the ranks it waited for, as before.
 */
export const BLAME_WINDOW_MS = 500;

/** What the rank whose deadline passed asks about. */
export interface BlameQuestion {
  readonly op: string;
  readonly seq: number;
  /** The group's transport tag. */
  readonly tag: number;
  /** This rank, global. */
  readonly self: number;
  /** The group's members, global ranks. */
  readonly members: readonly number[];
  /** The global ranks this rank was still waiting for. */
  readonly waitingFor: readonly number[];
  /** A collective (numbered per group), not a send or receive (numbered per peer). */
  readonly collective: boolean;
  readonly windowMs: number;
}

/** The outcome of a poll: adopt a rank's abort reason, or blame ranks. */
export type Verdict =
  | { readonly kind: 'adopt'; readonly reason: AbortReason }
  | {
      readonly kind: 'blame';
      /** Global ranks that never reached (or never finished) the op. */
      readonly blamed: readonly number[];
      /** Global ranks that answered and were merely waiting, this rank included. */
      readonly waiting: readonly number[];
      /** Why each blamed rank is blamed, and who was waiting, for the error message. */
      readonly detail: string;
    };

/** `rank 2` or `ranks 1, 2`. */
export function ranksText(ranks: readonly number[]): string {
  return `rank${ranks.length === 1 ? '' : 's'} ${ranks.join(', ')}`;
}

function whereItIs(report: ProgressReport, tag: number): string {
  const reached = report.reached[String(tag)] ?? -1;
  const elsewhere = report.ops.find((op) => op.tag !== tag);
  if (elsewhere !== undefined) {
    const waits = elsewhere.waitingFor;
    const on = waits.length === 0 ? '' : `, waiting for ${ranksText(waits)}`;
    return `it is in ${elsewhere.op} #${elsewhere.seq} of another group${on}`;
  }
  return reached < 0 ? 'it has started no op of this group' : `its last op was #${reached}`;
}

/** Judges the answers of a poll: see [Note: blaming a stalled rank]. */
export function judge(
  question: BlameQuestion,
  reports: ReadonlyMap<number, ProgressReport>,
): Verdict {
  const { op, seq, tag, self, windowMs } = question;
  const blamed: number[] = [];
  const waiting: number[] = [self];
  const clauses: string[] = [];
  for (const rank of question.members) {
    if (rank === self) continue;
    const report = reports.get(rank);
    if (report === undefined) {
      blamed.push(rank);
      clauses.push(
        `rank ${rank} never completed ${op} #${seq} (no progress report within ${windowMs} ms: stopped or hung)`,
      );
      continue;
    }
    if (report.abort !== undefined && report.abort.kind !== 'user') {
      return { kind: 'adopt', reason: report.abort };
    }
    const reached = report.reached[String(tag)] ?? -1;
    const inGroup = report.ops.some((running) => running.tag === tag);
    if (!question.collective || reached >= seq || inGroup) {
      waiting.push(rank);
      continue;
    }
    blamed.push(rank);
    clauses.push(`rank ${rank} never reached ${op} #${seq} (${whereItIs(report, tag)})`);
  }
  waiting.sort((a, b) => a - b);
  const merely = `${ranksText(waiting)} ${waiting.length === 1 ? 'was' : 'were'} merely waiting`;
  if (blamed.length === 0) {
    const everyone = `every rank answered and reached ${op} #${seq}`;
    return {
      kind: 'blame',
      blamed: [...question.waitingFor],
      waiting: waiting.filter((rank) => !question.waitingFor.includes(rank)),
      detail: everyone,
    };
  }
  return { kind: 'blame', blamed, waiting, detail: `${clauses.join('; ')}; ${merely}` };
}
