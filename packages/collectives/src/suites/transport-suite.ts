import { describe, expect, it } from 'vitest';
import {
  FAILURE_SCENARIOS,
  FAILURE_TIMEOUT_MS,
  type FailureScenario,
  type RankReport,
  type SuiteJob,
} from './suite.js';

/**
 * How a transport takes part in the shared suite: start `size` fresh ranks, run `job` on each with
 * `runSuiteJob(worldGroup, job, environment)` (created with `SUITE_GROUP_OPTIONS`), and return the
 * reports in rank order. A rank that died returns nothing: leave `null` in its place.
 */
export interface SuiteTransport {
  /** World sizes to test (e.g. [1, 2, 3, 4]). */
  readonly sizes: readonly number[];
  /** World sizes for the failure scenarios (each at least 2). */
  readonly failureSizes: readonly number[];
  /**
   * World sizes for particular scenarios instead of `failureSizes` (where starting ranks is slow:
   * worker threads, child processes).
   */
  readonly scenarioSizes?: Partial<Record<FailureScenario, readonly number[]>>;
  run(size: number, job: SuiteJob): Promise<(RankReport | null)[]>;
}

function present(reports: (RankReport | null)[], skip: number): RankReport[] {
  return reports.filter((r, i): r is RankReport => r !== null && i !== skip);
}

/**
 * The one collective test suite, run against a transport: every op and dtype at several sizes
 * (0, 1, primes, sizes not divisible by the world size, sizes that take the ring) checked against
 * references on every rank and bit-identical across ranks; handles awaited out of order; tensors;
 * send/recv; sub-groups; and the failure scenarios (calls that differ in op, dtype, count, reduce
 * op or root; a stalled rank, with the error's arrival bounded by the deadline; a barrier timeout;
 * a rank killed before an op, in the middle of a ring all-reduce, and rank 0 killed; use after
 * abort).
 */
export function runTransportSuite(name: string, transport: SuiteTransport): void {
  describe(`collectives over ${name}`, () => {
    for (const size of transport.sizes) {
      it(`world size ${size}: every op and dtype matches the reference, bit-identical on all ranks`, async () => {
        const reports = await transport.run(size, { kind: 'cases', seed: 1000 + size });
        expect(reports).toHaveLength(size);
        const all = present(reports, -1);
        expect(all).toHaveLength(size);
        const first = all[0]!;
        expect(first.cases.length).toBeGreaterThan(100);
        for (const report of all) {
          expect(report.cases.map((c) => c.name)).toEqual(first.cases.map((c) => c.name));
          expect(report.cases.filter((c) => c.failure !== null)).toEqual([]);
        }
        for (const [i, c] of first.cases.entries()) {
          if (!c.name.startsWith('allReduce') && !c.name.startsWith('allGather')) continue;
          for (const report of all)
            expect({ name: c.name, digest: report.cases[i]!.digest }).toEqual({
              name: c.name,
              digest: c.digest,
            });
        }
      });
    }

    for (const scenario of FAILURE_SCENARIOS) {
      for (const size of transport.scenarioSizes?.[scenario] ?? transport.failureSizes) {
        it(`world size ${size}: ${scenario} fails every rank with a typed error, then the group refuses use`, async () => {
          const reports = await transport.run(size, { kind: 'failure', scenario });
          checkFailure(scenario, size, reports);
        });
      }
    }
  });
}

/** What every surviving rank must see in a failure scenario. */
interface ExpectedFailure {
  /** The error class name. */
  name: string;
  /** The op the error names. */
  op: string;
  /** The sequence number of the op that failed, and of the world barrier called after it. */
  seq: number;
  afterSeq: number;
  /** The rank that stalls or dies (it reports nothing comparable), or -1. */
  victim: number;
}

function expectedFailure(scenario: FailureScenario, size: number): ExpectedFailure {
  const last = size - 1;
  switch (scenario) {
    case 'mismatch-op':
    case 'mismatch-dtype':
    case 'mismatch-count':
    case 'mismatch-reduce-op':
      return {
        name: 'CollectiveMismatchError',
        op: '(allReduce|broadcast)',
        seq: 1,
        afterSeq: 2,
        victim: -1,
      };
    case 'mismatch-root':
      return { name: 'CollectiveMismatchError', op: 'broadcast', seq: 1, afterSeq: 2, victim: -1 };
    case 'stall':
      return { name: 'CollectiveTimeoutError', op: 'allReduce', seq: 1, afterSeq: 2, victim: last };
    case 'barrier-timeout':
      return { name: 'CollectiveTimeoutError', op: 'barrier', seq: 1, afterSeq: 2, victim: last };
    case 'kill':
      return { name: 'PeerLostError', op: 'allReduce', seq: 1, afterSeq: 2, victim: last };
    case 'kill-rank-0':
      return { name: 'PeerLostError', op: 'allReduce', seq: 1, afterSeq: 2, victim: 0 };
    case 'kill-mid-ring':
      // The ring runs on a sub-group (its op #0); the world group's barrier after it is its #1.
      return { name: 'PeerLostError', op: 'allReduce', seq: 0, afterSeq: 1, victim: last };
  }
}

/**
 * Slack on top of the deadline for a timeout to reach every rank: generous, since a loaded
 * machine delays timers and sockets, yet far below `STALL_LIMIT_MS` (a rank that only failed when
 * the stalled rank came back would be seen).
 */
const DEADLINE_SLACK_MS = 5000;

function checkFailure(
  scenario: FailureScenario,
  size: number,
  reports: (RankReport | null)[],
): void {
  const last = size - 1;
  const expected = expectedFailure(scenario, size);
  const ranks = present(reports, expected.victim);
  expect(ranks).toHaveLength(expected.victim === -1 ? size : size - 1);
  for (const report of ranks) {
    const error = report.error;
    expect(error?.name, JSON.stringify(error)).toBe(expected.name);
    expect(error?.message).toMatch(
      new RegExp(`^\\[${expected.op}\\] rank ${report.rank} \\(seq ${expected.seq}\\): `),
    );
    expect(error?.seq).toBe(expected.seq);
    if (scenario === 'mismatch-op') expect(error?.message).toMatch(/broadcast\(root 0, f32 x 8\)/);
    if (scenario === 'mismatch-dtype') expect(error?.message).toMatch(/i32 x 8/);
    if (scenario === 'mismatch-count') expect(error?.message).toMatch(/f32 x 9/);
    if (scenario === 'mismatch-reduce-op') {
      // Whichever rank reports it names both calls.
      expect(error?.message).toContain('allReduce(max, f32 x 8) as op #1');
      expect(error?.message).toContain('allReduce(sum, f32 x 8) as op #1');
    }
    if (scenario === 'mismatch-root') {
      expect(error?.message).toContain(`broadcast(root ${last}, f32 x 8) as op #1`);
      expect(error?.message).toContain('broadcast(root 0, f32 x 8) as op #1');
    }
    if (scenario.startsWith('kill')) {
      expect(error?.peer, JSON.stringify(error)).toBe(expected.victim);
      expect(error?.message).toContain(`rank ${expected.victim}`);
    }
    if (scenario === 'stall' || scenario === 'barrier-timeout') {
      expect(error?.message).toContain(`timed out after ${FAILURE_TIMEOUT_MS} ms`);
      expect(report.elapsedMs).toBeLessThan(FAILURE_TIMEOUT_MS + DEADLINE_SLACK_MS);
    }
    if (scenario === 'barrier-timeout')
      expect(error?.message).toMatch(
        new RegExp(`waiting for ranks? [0-9, ]*${last}$|waiting for ranks? [0-9, ]*${last} `),
      );
    expect(report.afterError?.name).toBe('GroupAbortedError');
    expect(report.afterError?.message).toMatch(
      new RegExp(
        `^\\[barrier\\] rank ${report.rank} \\(seq ${expected.afterSeq}\\): the group was aborted earlier by rank \\d+`,
      ),
    );
  }
  if (scenario === 'stall' || scenario === 'barrier-timeout') {
    // The deadline did not fire early: the rank whose own deadline passed waited all of it.
    const longest = Math.max(...ranks.map((r) => r.elapsedMs ?? 0));
    expect(longest).toBeGreaterThanOrEqual(FAILURE_TIMEOUT_MS - 5);
  }
  if (scenario === 'stall') {
    const stalled = reports[last];
    if (stalled) expect(stalled.error?.name).toBe('GroupAbortedError');
  }
}
