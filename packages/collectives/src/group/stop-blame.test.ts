import { describe, expect, it } from 'vitest';
import {
  type FaultPlan,
  type FaultRankReport,
  FAULT_MARGIN_MS,
} from '../test-support/fault-plan.js';
import { runPlanInChildren, runPlanInProcess } from '../test-support/fault-world.js';
import { runPlanInThreads } from '../test-support/shm/fault-threads.js';
import { BLAME_WINDOW_MS, ranksText } from './blame.js';

/**
 * A rank stopped (SIGSTOP), not killed, in the middle of a ring all-reduce must be the rank every
 * survivor's error names (#20 item 3, [Note: blaming a stalled rank]). The ranks are child
 * processes over tcp and ws; the stopped rank stops itself once 16 KiB of the ring reached it. In
 * this process, the same stop is a frozen transport whose board answers no poll.
 */
function plan(world: FaultPlan['world'], size: number, victim: number): FaultPlan {
  return {
    seed: 0,
    world,
    size,
    ops: ['ring'],
    root: 0,
    victim,
    fault: 'stop',
    at: 0,
    afterBytes: 16 * 1024,
    leave: false,
    timeoutMs: world.endsWith('-processes') ? 1000 : 400,
  };
}

/** The exact error a survivor must see: the poll's verdict, from whichever rank reported it. */
function checkSurvivor(run: FaultPlan, report: FaultRankReport | null | undefined): void {
  const error = report?.error;
  expect(error?.name, error?.message).toBe('CollectiveTimeoutError');
  const { rank } = report!;
  const origin = error!.origin!;
  const survivors = Array.from({ length: run.size }, (_, r) => r).filter((r) => r !== run.victim);
  const core =
    `timed out after ${run.timeoutMs} ms waiting for ${ranksText(error!.peers!)} ` +
    `(rank ${run.victim} never completed allReduce #1 (no progress report within ${BLAME_WINDOW_MS} ms: stopped or hung); ` +
    `${ranksText(survivors)} were merely waiting)`;
  const message =
    origin === rank
      ? `[allReduce] rank ${rank} (seq 1): ${core}`
      : `[allReduce] rank ${rank} (seq 1): allReduce #1 on rank ${origin} ${core} (reported by rank ${origin})`;
  expect(error).toEqual({
    name: 'CollectiveTimeoutError',
    message,
    op: 'allReduce',
    seq: 1,
    peer: run.victim,
    blamed: [run.victim],
    waiting: survivors,
    kind: 'timeout',
    origin,
    peers: error!.peers,
    reasonBlamed: [run.victim],
  });
  expect(survivors).toContain(origin);
  expect(error!.peers!.length).toBeGreaterThan(0);
  expect(report!.elapsedMs).toBeLessThan(run.timeoutMs + BLAME_WINDOW_MS + FAULT_MARGIN_MS);
}

describe.each([
  ['tcp-processes', 3],
  ['tcp-processes', 4],
  ['ws-processes', 3],
  ['ws-processes', 4],
] as const)('a rank stopped mid-ring over %s, world size %i', (world, size) => {
  it('is named by every survivor, within the deadline plus the blame window and a margin', async () => {
    const run = plan(world, size, size - 2);
    const reports = await runPlanInChildren(run, 60_000);
    expect(reports).not.toBe('hang');
    for (let rank = 0; rank < size; rank++) {
      if (rank === run.victim) expect((reports as unknown[])[rank]).toBeNull();
      else checkSurvivor(run, (reports as FaultRankReport[])[rank]);
    }
  }, 90_000);
});

describe.each([
  ['local', 3],
  ['local', 4],
  ['tcp', 3],
  ['tcp', 4],
  ['ws', 3],
  ['ws', 4],
] as const)('a rank frozen mid-ring over %s in this process, world size %i', (world, size) => {
  it('is named by every survivor', async () => {
    const run = plan(world, size, 1);
    const reports = await runPlanInProcess(run, 20_000);
    expect(reports).not.toBe('hang');
    for (let rank = 0; rank < size; rank++) {
      if (rank !== run.victim) checkSurvivor(run, (reports as FaultRankReport[])[rank]);
    }
  }, 30_000);
});

describe.each([
  [3, false],
  [4, false],
  [3, true],
  [4, true],
] as const)(
  'a thread blocked in Atomics.wait over shm, world size %i (shared arena: %s)',
  (size, arena) => {
    it('is named by every survivor', async () => {
      // In the arena nothing is received: the thread blocks before the all-reduce instead.
      const run = { ...plan('local', size, size - 1), afterBytes: arena ? 0 : 16 * 1024 };
      const stallMs = run.timeoutMs + BLAME_WINDOW_MS + FAULT_MARGIN_MS + 500;
      const reports = await runPlanInThreads(run, stallMs, arena);
      for (let rank = 0; rank < size; rank++) {
        if (rank !== run.victim) checkSurvivor(run, reports[rank]);
      }
    }, 60_000);
  },
);
