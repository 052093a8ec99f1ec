import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import { describe, expect, it } from 'vitest';
import { parseOptions } from '../cli/options.js';
import type { TrainConfig } from '../config.js';
import type { StepRecord } from '../progress.js';
import { TINY } from '../test-support/cli.js';
import { train } from '../train.js';

/**
 * Holds each of `group`'s step-line all-gathers (seven float64 a rank: `issueRankFields`) until the
 * rank issues its next all-reduce, which under ddp is the next step's gradients, or until 2 s
 * have passed; `held` says which let each one go.
 */
function holdLineGathers(group: ProcessGroup) {
  const held: ('next step' | 'timeout')[] = [];
  const open: (() => void)[] = [];
  const allGather = group.allGather.bind(group);
  const allReduce = group.allReduce.bind(group);
  (group as { allGather: unknown }).allGather = (...args: Parameters<typeof allGather>) => {
    const work = allGather(...args);
    if ((args[0] as { length?: number }).length !== 14) return work;
    const index = held.length;
    held.push('timeout');
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const timer = setTimeout(release, 2000);
    open.push(() => {
      clearTimeout(timer);
      held[index] = 'next step';
      release();
    });
    return { ...work, wait: async () => (await Promise.all([work.wait(), gate]))[0] };
  };
  (group as { allReduce: unknown }).allReduce = (...args: Parameters<typeof allReduce>) => {
    for (const release of open.splice(0)) release();
    return allReduce(...args);
  };
  return held;
}

describe('[Note: a step line a step late]', () => {
  it("a ddp step's line gathers while the next step computes, and every line has every rank's numbers", async () => {
    const steps = 5;
    const config = parseOptions(
      [...TINY, '--strategy', 'ddp', '--world-size', '2', '--steps', String(steps)],
      '/',
    ) as TrainConfig;
    const groups = createLocalGroups(2, { timeoutMs: 30_000 });
    const held = groups.map(holdLineGathers);
    const seen: StepRecord[][] = [[], []];
    const runs = await Promise.all(
      groups.map((group) =>
        train(
          config,
          { stdout: () => {}, isTTY: false, onStep: (r) => seen[group.rank]!.push(r) },
          group,
        ),
      ),
    );
    await Promise.all(groups.map((g) => g.close()));
    // Each step's all-gather was let go by the next step's all-reduce, so the loop had gone on
    // without waiting for it; the last step's is settled at once (nothing follows it).
    for (const rank of [0, 1]) {
      expect(held[rank]).toEqual([...Array(steps - 1).fill('next step'), 'timeout']);
    }
    for (const [rank, run] of runs.entries()) {
      expect(seen[rank]!.map((r) => r.step)).toEqual([1, 2, 3, 4, 5]);
      for (const record of run.records) {
        expect(record.tokensPerSecondPerRank).toHaveLength(2);
        expect(record.peakDeviceBytesPerRank).toHaveLength(2);
      }
    }
    // ddp's loss is averaged inside the step: the same on both ranks, bit for bit.
    expect(runs[0]!.records.map((r) => r.loss)).toEqual(runs[1]!.records.map((r) => r.loss));
  });

  it("diloco averages the ranks' losses in the line's all-gather, not in a collective of the step", async () => {
    const config = parseOptions(
      [...TINY, '--strategy', 'diloco', '--world-size', '2', '--steps', '4', '--inner-steps', '2'],
      '/',
    ) as TrainConfig;
    const groups = createLocalGroups(2, { timeoutMs: 30_000 });
    // After step 1 (quiet, its line written at once): the scalar gathers of one number a rank
    // (`averageScalar`, the loss's mean inside a step) and the line's of seven.
    const counted = groups.map((group) => {
      const sizes: number[] = [];
      const allGather = group.allGather.bind(group);
      (group as { allGather: unknown }).allGather = (...args: Parameters<typeof allGather>) => {
        if (sizes.length > 0 || started[group.rank])
          sizes.push((args[0] as { length?: number }).length ?? -1);
        return allGather(...args);
      };
      return sizes;
    });
    const started = [false, false];
    const runs = await Promise.all(
      groups.map((group) =>
        train(
          config,
          {
            stdout: () => {},
            isTTY: false,
            onStep: () => {
              started[group.rank] = true;
            },
          },
          group,
        ),
      ),
    );
    await Promise.all(groups.map((g) => g.close()));
    for (const sizes of counted) {
      expect(sizes.filter((n) => n === 2)).toEqual([]);
      expect(sizes.filter((n) => n === 14)).toEqual([14, 14]);
    }
    const [a, b] = runs.map((run) => run.records);
    // Steps 1 and 3 are quiet: each rank's own loss on its own data.
    expect(a![0]!.loss).not.toBe(b![0]!.loss);
    expect(a![0]!.tokensPerSecondPerRank).toBeUndefined();
    // Steps 2 and 4 sync: both ranks log the same mean.
    for (const index of [1, 3]) {
      expect(a![index]!.loss).toBe(b![index]!.loss);
      expect(a![index]!.tokensPerSecondPerRank).toHaveLength(2);
    }
  });

  it("--max-seconds stops every rank of a job after the same step, by rank 0's clock", async () => {
    const config = parseOptions(
      [
        ...TINY,
        '--strategy',
        'ddp',
        '--world-size',
        '2',
        '--steps',
        '100000',
        '--max-seconds',
        '1',
      ],
      '/',
    ) as TrainConfig;
    const groups = createLocalGroups(2, { timeoutMs: 5000 });
    // Rank 1's clock runs at a tenth of rank 0's speed: by its own it would stop 9 s later.
    const lines: string[] = [];
    const runs = await Promise.all(
      groups.map((group) =>
        train(
          config,
          {
            stdout: (text) => {
              if (group.rank === 0) lines.push(text);
            },
            isTTY: false,
            now: () => performance.now() * (group.rank === 1 ? 0.1 : 1),
          },
          group,
        ),
      ),
    );
    await Promise.all(groups.map((g) => g.close()));
    const last = runs.map((run) => run.records.at(-1)!.step);
    expect(last[1]).toBe(last[0]);
    expect(last[0]).toBeLessThan(100000);
    expect(lines.join('')).toContain(
      `stopped after step ${last[0]} of 100000: the 1 s budget is spent`,
    );
    // Rank 0's line before the last had passed the budget: the job stops a step after it.
    expect(runs[0]!.records.at(-2)!.seconds!).toBeGreaterThanOrEqual(1);
    expect(runs[0]!.records.at(-3)!.seconds!).toBeLessThan(1);
  });
});
