import { describe, expect, it } from 'vitest';
import { STORE_SILENCE_MS } from '../rendezvous/store-progress-board.js';
import {
  FAULT_MARGIN_MS,
  type FaultPlan,
  type FaultRankReport,
} from '../test-support/fault-plan.js';
import { runPlanInChildren, runPlanInProcess } from '../test-support/fault-world.js';
import { BLAME_WINDOW_MS } from './blame.js';

/**
 * Rank 0 hosts the rendezvous store: stopped (SIGSTOP; in this process, a frozen transport and a
 * store that reads nothing more), it must be named by every survivor like any stalled rank, not
 * hang them in a poll of the store it hosts (#33 item 8, [Note: a silent store host]). The plan
 * of fault seed 50075: a broadcast from rank 0, rank 0 stopped once the fingerprints (72 bytes at
 * 4 ranks) reached it; in this process, stopped before the broadcast.
 */
function plan(world: FaultPlan['world'], size: number, afterBytes: number): FaultPlan {
  return {
    seed: 0,
    world,
    size,
    ops: ['broadcast', 'broadcast'],
    root: 0,
    victim: 0,
    fault: 'stop',
    at: 0,
    afterBytes,
    leave: false,
    timeoutMs: world.endsWith('-processes') ? 1000 : 400,
  };
}

const SILENT = `the rendezvous store on rank 0 did not answer a progress poll within ${BLAME_WINDOW_MS + STORE_SILENCE_MS} ms (rank 0 is stopped or hung)`;

function checkSurvivor(run: FaultPlan, report: FaultRankReport | null | undefined): void {
  const error = report?.error;
  expect(error?.name, error?.message).toBe('CollectiveTimeoutError');
  expect(error!.op).toBe('broadcast');
  // Struck after the fingerprints, rank 0 may have sent the first broadcast's data already.
  expect([1, 2]).toContain(error!.seq);
  expect(error!.peer).toBe(0);
  expect(error!.blamed).toEqual([0]);
  expect(error!.reasonBlamed).toEqual([0]);
  expect(error!.kind).toBe('timeout');
  expect(error!.message).toContain(SILENT);
  expect(error!.message).toMatch(/^\[broadcast\] rank \d \(seq [12]\): /);
  const limit = run.timeoutMs + BLAME_WINDOW_MS + STORE_SILENCE_MS + FAULT_MARGIN_MS;
  expect(report!.elapsedMs).toBeLessThan(limit);
}

describe.each([
  ['tcp-processes', 4, 72],
  ['ws-processes', 4, 72],
] as const)(
  'rank 0, the store host, stopped in a broadcast over %s (%i ranks, after %i bytes)',
  (world, size, afterBytes) => {
    it('is named by every survivor within the deadline, the poll window and the store silence', async () => {
      const run = plan(world, size, afterBytes);
      const reports = await runPlanInChildren(run, 60_000);
      expect(reports).not.toBe('hang');
      expect((reports as unknown[])[0]).toBeNull();
      for (let rank = 1; rank < size; rank++) {
        checkSurvivor(run, (reports as FaultRankReport[])[rank]);
      }
    }, 90_000);
  },
);

describe.each([
  ['tcp', 3],
  ['ws', 3],
] as const)('rank 0 and its store frozen over %s in this process (%i ranks)', (world, size) => {
  it('is named by every survivor', async () => {
    const run = plan(world, size, 0);
    const reports = await runPlanInProcess(run, 20_000);
    expect(reports).not.toBe('hang');
    for (let rank = 1; rank < size; rank++) {
      checkSurvivor(run, (reports as FaultRankReport[])[rank]);
    }
  }, 30_000);
});
