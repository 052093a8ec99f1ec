import { describe, expect, it } from 'vitest';
import type { SuiteJob } from '../suites/suite.js';
import { runJobInChildren } from '../test-support/network-world.js';

/**
 * Blame the rank that died, not a survivor that saw it first and left at once (#20 item 4), with
 * ranks as child processes: the last of 4 is killed (SIGKILL) in the middle of a ring all-reduce,
 * and every survivor closes and exits as soon as it has its error. Each survivor's error must name
 * the dead rank. The race is rare (before [Note: blaming a rank that left], 2 wrong blames in 24
 * rounds over ws), so this runs only on request: `WEBSHARD_BLAME_ROUNDS=15 pnpm test -- blame`
 * (the deterministic test is `ws/ws-blame.test.ts`).
 */
const SIZE = 4;
const ROUNDS = Number(process.env.WEBSHARD_BLAME_ROUNDS ?? 0);
const JOB: SuiteJob = { kind: 'failure', scenario: 'kill-mid-ring' };

// Skipped unless WEBSHARD_BLAME_ROUNDS is set: a rare race hunted by many rounds (above); CI runs
// the deterministic ws/ws-blame.test.ts instead. Issue 20, item 4 (ended), says so.
describe.skipIf(ROUNDS === 0).each([
  ['tcp', false],
  ['ws', false],
  ['ws', true],
] as const)('blame over %s (relayed: %s) when survivors leave at once', (backend, relayed) => {
  it(`names the killed rank on every survivor (${ROUNDS} runs of ${SIZE} ranks)`, async () => {
    const victim = SIZE - 1;
    for (let round = 0; round < ROUNDS; round++) {
      const reports = await runJobInChildren(backend, SIZE, JOB, relayed, 'leave');
      expect(reports[victim]).toBeNull();
      for (const report of reports.slice(0, victim)) {
        const error = report!.error;
        const seen = { round, rank: report!.rank, name: error?.name, peer: error?.peer };
        expect(seen, error?.message).toEqual({ ...seen, name: 'PeerLostError', peer: victim });
      }
    }
  }, 600_000);
});
