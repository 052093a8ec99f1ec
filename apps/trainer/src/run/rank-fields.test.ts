import { createLocalGroups } from '@webshard/collectives';
import { describe, expect, it } from 'vitest';
import type { StopSignal } from '../interrupt.js';
import { issueRankFields } from './rank-fields.js';

describe("a step line's per-rank fields", () => {
  it.each([
    { signals: [null, null, null], agreed: null },
    { signals: [null, 'SIGINT', null], agreed: 'SIGINT' },
    { signals: [null, 'SIGINT', 'SIGTERM'], agreed: 'SIGTERM' },
  ] as { signals: (StopSignal | null)[]; agreed: StopSignal | null }[])(
    'come from one all-gather a rank with the stop every rank acts on (signals $signals: $agreed)',
    async ({ signals, agreed }) => {
      const groups = createLocalGroups(3);
      const calls: number[] = [];
      for (const group of groups) {
        for (const name of ['allGather', 'allReduce', 'broadcast', 'send', 'recv'] as const) {
          const call = (group[name] as (...a: unknown[]) => unknown).bind(group);
          (group as unknown as Record<string, unknown>)[name] = (...a: unknown[]) => {
            calls.push(group.rank);
            return call(...a);
          };
        }
      }
      // 96 tokens a step, 32 a rank; rank r took 100 (r + 1) ms, peaked at (r + 1) MiB and saw a
      // loss of 0.1 + r / 3. Each rank's all-gather is issued before `issueRankFields` resolves.
      const issued = [];
      for (const group of groups) {
        issued.push(
          await issueRankFields(
            group,
            {
              peakAllocated: (group.rank + 1) * 2 ** 20,
              tokensPerStep: 96,
              ms: 100 * (group.rank + 1),
              loss: 0.1 + group.rank / 3,
              seconds: 10 + group.rank,
            },
            { signal: signals[group.rank]! },
          ),
        );
        expect(calls).toHaveLength(group.rank + 1);
      }
      const all = await Promise.all(issued.map(({ gathered }) => gathered));
      expect(calls.sort()).toEqual([0, 1, 2]);
      for (const [rank, { fields, stop, meanLoss, leadSeconds }] of all.entries()) {
        expect(stop).toBe(agreed);
        // The budget's clock is rank 0's on every rank.
        expect(leadSeconds).toBe(10);
        // Summed in rank order in double precision, as averageScalar does: the same on every rank.
        expect(meanLoss).toBe((0.1 + (0.1 + 1 / 3) + (0.1 + 2 / 3)) / 3);
        expect(fields.peakDeviceBytesPerRank).toEqual([2 ** 20, 2 * 2 ** 20, 3 * 2 ** 20]);
        expect(fields.tokensPerSecondPerRank).toEqual([320, 160, 320 / 3]);
        // The ranks are threads of this process: one resident memory, shared by all 3.
        expect(fields.hostRanksPerProcess).toBe(3);
        expect(fields.peakHostBytesPerRank).toHaveLength(3);
        for (const peak of fields.peakHostBytesPerRank!) expect(peak).toBeGreaterThan(2 ** 20);
        expect(fields.peakHostBytes).toBe(fields.peakHostBytesPerRank![rank]);
      }
      await Promise.all(groups.map((group) => group.close()));
    },
  );
});
