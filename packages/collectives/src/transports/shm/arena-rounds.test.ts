import { describe, expect, it } from 'vitest';
import { shardRange } from '../../shard.js';
import type {
  ArenaRoundsJob,
  ArenaRoundsReport,
} from '../../test-support/shm/arena-rounds-worker.js';
import { inputValue } from '../../test-support/shm/shm-registered-cases.js';
import { tsxBootstrap } from '../../test-support/shm/shm-suite-run.js';
import { launchThreads } from './launch-threads.js';

// Issue 44: a reduce-scatter of registered inputs in segment 0 whose outputs lay in segment 0 on
// some ranks and in segment 1 on others advanced the arena's round counter only on the ranks that
// staged their output through a slot, so from then on the ranks used different sets of slots and
// every small all-gather read another op's bytes (the GPT-2 fsdp run's gatherScalar calls: a
// rank's pid where its peak memory should be, an agreed stop no rank asked for).
describe('arena rounds stay aligned across ranks', () => {
  for (const size of [2, 3]) {
    it(`a reduce-scatter with outputs in different segments, then all-gathers through the slots, ${size} ranks`, async () => {
      const job: ArenaRoundsJob = { count: 1000 * size + 7, gathers: 4 };
      const outcomes = await launchThreads<ArenaRoundsJob, ArenaRoundsReport>(
        size,
        tsxBootstrap('./arena-rounds-worker.ts'),
        job,
        {
          eval: true,
          execArgv: ['--conditions=@webshard/source'],
          group: { timeoutMs: 30_000 },
          slotBytes: 65536,
        },
      );
      const sum = (i: number) => {
        let acc = inputValue('f32', 0, i);
        for (let r = 1; r < size; r++) acc = Math.fround(acc + inputValue('f32', r, i));
        return acc;
      };
      const reports = outcomes.map((outcome) => {
        expect(outcome.status, JSON.stringify(outcome).slice(0, 2000)).toBe('fulfilled');
        return (outcome as { value: ArenaRoundsReport }).value;
      });
      for (const [rank, report] of reports.entries()) {
        expect(report.outputSegment, `rank ${rank}'s output`).toBe(rank === size - 1 ? 0 : 1);
        const own = shardRange(job.count, size, rank);
        expect(report.scattered).toEqual(
          Array.from({ length: own.count }, (_, i) => sum(own.start + i)),
        );
        expect(report.gathered).toHaveLength(3 + job.gathers);
        report.gathered.forEach((result, k) => {
          const expected = reports.flatMap((peer) => peer.passed[k]!);
          expect(result, `rank ${rank}, all-gather ${k}`).toEqual(expected);
        });
      }
    }, 60_000);
  }

  it('a rank that took a round more is refused at the next barrier, on every rank, naming both positions', async () => {
    const size = 3;
    const outcomes = await launchThreads<ArenaRoundsJob, ArenaRoundsReport>(
      size,
      tsxBootstrap('./arena-rounds-worker.ts'),
      { count: 0, gathers: 0, skew: true },
      { eval: true, execArgv: ['--conditions=@webshard/source'], group: { timeoutMs: 30_000 } },
    );
    // The first rank to compare the stamps raises the abort at op #1's fingerprint exchange (the
    // first barrier after the skew); every rank fails op #1 with it.
    const detail =
      /^\[allGather\] rank \d \(seq 1\): rank (\d) arrived at barrier 3 \(the fingerprints of op #1 of group 0, round set (\d), exchange slots 0\) but rank (\d) at barrier 3 \(the fingerprints of op #1 of group 0, round set (\d), exchange slots 0\): their shared-memory schedules diverged, so the slots hold another op's bytes \(none was used\)/;
    for (const outcome of outcomes) {
      expect(outcome.status).toBe('rejected');
      const error = (outcome as { error: { name: string; message: string } }).error;
      expect(error.name).toBe('CollectiveMismatchError');
      const [, origin, originSet, peer, peerSet] = detail.exec(error.message) ?? [];
      expect(error.message, error.message).toMatch(detail);
      // The last rank's round set is one ahead of the others'.
      const setOf = (rank: string) => (rank === origin ? originSet : peerSet);
      expect([origin, peer]).toContain(String(size - 1));
      expect(Number(setOf(String(size - 1)))).toBe(
        (Number(setOf(origin === String(size - 1) ? peer! : origin!)) + 1) % 3,
      );
    }
  }, 60_000);
});
