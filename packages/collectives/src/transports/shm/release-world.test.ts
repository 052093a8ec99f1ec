import { expect, it } from 'vitest';
import { tsxBootstrap } from '../../test-support/shm/shm-suite-run.js';
import { launchThreads } from './launch-threads.js';

// [Note: an ended world's memory]: worlds launched one after another in one process, each rank
// writing every page of its registered buffer, do not pile up: once a launch returns, its world's
// pages are the system's again. Without the collection in launchThreads every launch left its
// 384 MiB resident here (1.5 GiB more after the fifth than after the first).
const BYTES = 192 * 2 ** 20;
const MiB = 2 ** 20;

it('an ended world gives its shared memory back: five 2-rank worlds of 384 MiB in turn end near one', async () => {
  const resident: number[] = [];
  for (let launch = 0; launch < 5; launch++) {
    const outcomes = await launchThreads<number, number>(
      2,
      tsxBootstrap('./touch-registered-worker.ts'),
      BYTES,
      { eval: true, execArgv: ['--conditions=@webshard/source'], group: { timeoutMs: 60_000 } },
    );
    expect(outcomes.map((o) => (o.status === 'fulfilled' ? o.value : o))).toEqual([1, 2]);
    resident.push(process.memoryUsage().rss);
  }
  const grew = (resident.at(-1)! - resident[0]!) / MiB;
  console.log(
    `resident after each launch: ${resident.map((r) => (r / MiB).toFixed(0)).join(', ')} MiB (+${grew.toFixed(0)} MiB)`,
  );
  // One world is 384 MiB: the fifth launch may hold at most about one more than the first.
  expect(grew).toBeLessThan(400);
}, 120_000);
