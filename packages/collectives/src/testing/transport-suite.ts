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
  run(size: number, job: SuiteJob): Promise<(RankReport | null)[]>;
}

function present(reports: (RankReport | null)[], skip: number): RankReport[] {
  return reports.filter((r, i): r is RankReport => r !== null && i !== skip);
}

/**
 * The one collective test suite, run against a transport: every op and dtype at several sizes
 * (0, 1, primes, sizes not divisible by the world size, sizes that take the ring) checked against
 * references on every rank and bit-identical across ranks; handles awaited out of order; tensors;
 * send/recv; sub-groups; and the failure scenarios (mismatched calls, a stalled rank, a barrier
 * timeout, a killed rank, use after abort).
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

    for (const size of transport.failureSizes) {
      for (const scenario of FAILURE_SCENARIOS) {
        it(`world size ${size}: ${scenario} fails every rank with a typed error, then the group refuses use`, async () => {
          const reports = await transport.run(size, { kind: 'failure', scenario });
          checkFailure(scenario, size, reports);
        });
      }
    }
  });
}

function checkFailure(
  scenario: FailureScenario,
  size: number,
  reports: (RankReport | null)[],
): void {
  const last = size - 1;
  const expectedName = scenario.startsWith('mismatch')
    ? 'CollectiveMismatchError'
    : scenario === 'kill'
      ? 'PeerLostError'
      : 'CollectiveTimeoutError';
  const victims = scenario === 'mismatch-op' || scenario.startsWith('mismatch') ? -1 : last;
  const ranks = present(reports, victims);
  expect(ranks).toHaveLength(victims === -1 ? size : size - 1);
  for (const report of ranks) {
    const error = report.error;
    expect(error?.name, JSON.stringify(error)).toBe(expectedName);
    expect(error?.message).toMatch(/^\[(allReduce|broadcast|barrier)\] rank \d+ \(seq 1\): /);
    expect(error?.seq).toBe(1);
    if (scenario === 'mismatch-op') expect(error?.message).toMatch(/broadcast\(root 0, f32 x 8\)/);
    if (scenario === 'mismatch-dtype') expect(error?.message).toMatch(/i32 x 8/);
    if (scenario === 'mismatch-count') expect(error?.message).toMatch(/f32 x 9/);
    if (scenario === 'kill') {
      expect(error?.peer).toBe(last);
      expect(error?.message).toContain(`rank ${last}`);
    }
    if (scenario === 'stall' || scenario === 'barrier-timeout') {
      expect(error?.message).toContain(`timed out after ${FAILURE_TIMEOUT_MS} ms`);
    }
    if (scenario === 'barrier-timeout')
      expect(error?.message).toMatch(
        new RegExp(`waiting for ranks? [0-9, ]*${last}$|waiting for ranks? [0-9, ]*${last} `),
      );
    expect(report.afterError?.name).toBe('GroupAbortedError');
    expect(report.afterError?.message).toMatch(
      /^\[barrier\] rank \d+ \(seq 2\): the group was aborted earlier by rank \d+/,
    );
  }
  if (scenario === 'stall') {
    const stalled = reports[last];
    if (stalled) expect(stalled.error?.name).toBe('GroupAbortedError');
  }
}
