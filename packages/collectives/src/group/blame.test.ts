import { describe, expect, it } from 'vitest';
import type { AbortReason } from '../errors.js';
import { type BlameQuestion, judge } from './blame.js';
import type { ProgressReport } from '../progress/progress.js';

const question: BlameQuestion = {
  op: 'allReduce',
  seq: 3,
  tag: 0,
  self: 0,
  members: [0, 1, 2, 3],
  waitingFor: [1],
  collective: true,
  windowMs: 500,
};

function report(rank: number, reached: number, ops: ProgressReport['ops'] = []): ProgressReport {
  return { rank, ops, reached: { '0': reached } };
}

describe('judge ([Note: blaming a stalled rank])', () => {
  it('blames the rank that did not answer, not the neighbour that waited for it', () => {
    const reports = new Map([
      [1, report(1, 3, [{ tag: 0, op: 'allReduce', seq: 3, waitingFor: [2] }])],
      [3, report(3, 3, [{ tag: 0, op: 'allReduce', seq: 3, waitingFor: [2] }])],
    ]);
    expect(judge(question, reports)).toEqual({
      kind: 'blame',
      blamed: [2],
      waiting: [0, 1, 3],
      detail:
        'rank 2 never completed allReduce #3 (no progress report within 500 ms: stopped or hung); ranks 0, 1, 3 were merely waiting',
    });
  });

  it('blames a rank that answered but never called the op, and says where it is', () => {
    const reports = new Map([
      [1, report(1, 2, [{ tag: 0, op: 'broadcast', seq: 2, waitingFor: [2] }])],
      [2, report(2, 2)],
      [3, report(3, -1, [{ tag: 7, op: 'barrier', seq: 0, waitingFor: [1] }])],
    ]);
    expect(judge(question, reports)).toEqual({
      kind: 'blame',
      blamed: [2, 3],
      waiting: [0, 1],
      detail:
        'rank 2 never reached allReduce #3 (its last op was #2); rank 3 never reached allReduce #3 (it is in barrier #0 of another group, waiting for rank 1); ranks 0, 1 were merely waiting',
    });
  });

  it('adopts the reason of a rank that already saw the failure', () => {
    const lost: AbortReason = { kind: 'peer-lost', origin: 3, peer: 2, message: 'rank 2 is gone' };
    const reports = new Map([
      [1, report(1, 3)],
      [3, { ...report(3, 3), abort: lost }],
    ]);
    expect(judge(question, reports)).toEqual({ kind: 'adopt', reason: lost });
  });

  it('blames the ranks it waited for when every rank reached the op', () => {
    const inOp = (rank: number) =>
      report(rank, 3, [{ tag: 0, op: 'allReduce', seq: 3, waitingFor: [0] }]);
    const reports = new Map([1, 2, 3].map((rank) => [rank, inOp(rank)] as const));
    expect(judge(question, reports)).toEqual({
      kind: 'blame',
      blamed: [1],
      waiting: [0, 2, 3],
      detail: 'every rank answered and reached allReduce #3',
    });
  });

  it('judges a send or receive by silence alone (they are numbered per peer)', () => {
    const p2p = { ...question, op: 'recv', members: [0, 1], collective: false };
    expect(judge(p2p, new Map([[1, report(1, -1)]]))).toMatchObject({ blamed: [1], waiting: [0] });
    expect(judge(p2p, new Map())).toMatchObject({ blamed: [1], waiting: [0] });
  });
});
