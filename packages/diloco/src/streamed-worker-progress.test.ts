import type { ProgressMode } from '@webshard/collectives';
import { AdamW } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { DiLoCo } from './diloco.js';
import { buildModel } from './test-support/mlp-case.js';
import { clock, type OpTimes, recordSubGroupOps } from './test-support/sub-group-ops.js';
import { closeWorld, createShapedWorld } from './test-support/worlds.js';

// [Note: streamed fragments], progress on the communication worker: with `progress: 'worker'`
// the ranks' tcp transports (and the link shaper, broadband-20: 40 ms and 20 Mbit/s each way) run
// on workers, so the ops of a fragment's average complete while the ranks' thread is held by
// steps that never yield. Measured by the worker's own completion times
// (`WorkerGroup.completedAt`), not by a wall-clock bound: each op must have completed inside one
// of the held intervals. On the rank's thread (`progress: 'thread'`) an op can only complete when
// the thread turns the event loop, between the held steps, and this test fails.

/** The mode under test: 'thread' makes every check below fail (done once by hand). */
const PROGRESS: ProgressMode = 'worker';
/** Each held step: the thread runs a kernel this long without yielding. */
const HELD_MS = 1000;

describe('streamed fragments on the communication worker', () => {
  it('a fragment average issued before held steps completes during them, over broadband-20 (tcp)', async () => {
    const groups = await createShapedWorld(2, 'broadband-20', PROGRESS);
    const ops: OpTimes[] = [];
    for (const group of groups) recordSubGroupOps(group, ops);
    const models = groups.map(() => buildModel(3));
    // H = 6 in 2 fragments with an overlap of 3: fragment 1 is issued after step 3 and lands
    // after step 6; int8's average is two calls (the shard exchange, then the all-gather).
    const dilocos = await Promise.all(
      groups.map((group, r) =>
        DiLoCo.create(models[r]!.parameters(), new AdamW(models[r]!.parameters()), {
          group,
          innerSteps: 6,
          fragments: 2,
          overlap: 3,
          compression: 'int8',
          blockSize: 8,
        }),
      ),
    );
    const held: { from: number; to: number }[] = [];
    const hold = () => {
      const from = clock();
      while (clock() < from + HELD_MS) {
        // a kernel that never yields
      }
      held.push({ from, to: clock() });
    };
    const landed: { step: number; waitMs: number }[] = [];
    let issuedBy = 0;
    let beforeLast = 0;
    for (let step = 1; step <= 6; step++) {
      if (step === 4) issuedBy = ops.length;
      // Step 6 lands fragment 1 and issues fragment 0, whose ops are not the ones measured.
      if (step === 6) beforeLast = ops.length;
      const results = await Promise.all(
        dilocos.map(async (d) => {
          if (step >= 4) hold();
          return d.afterInnerStep();
        }),
      );
      for (const result of results) if (result.synced) landed.push({ step, waitMs: result.waitMs });
    }
    // Fragment 1's average: its calls, issued after step 3 (the shard exchange) and during the
    // held steps (the all-gather, once a turn of the rank's thread saw the exchange done).
    // A send completes when the real socket took its bytes (the shaper delays the receive), so
    // the ops that wait on the link are the receives and the all-gathers.
    const fragment = ops.slice(0, beforeLast).filter((op) => op.op !== 'send');
    expect(issuedBy).toBeGreaterThan(0);
    expect(ops.slice(issuedBy, beforeLast).map((op) => op.op)).toEqual(['allGather', 'allGather']);
    for (const op of fragment) {
      expect(op.completed).not.toBeNull();
      const during = held.some((h) => op.completed! > h.from && op.completed! < h.to);
      expect({ ...op, during }).toEqual({ ...op, during: true });
    }
    // Landed after step 6 on both ranks without waiting for the average.
    expect(landed).toEqual([
      { step: 6, waitMs: 0 },
      { step: 6, waitMs: 0 },
    ]);
    await Promise.all(dilocos.map((d) => d.outerSync()));
    await closeWorld(groups);
  }, 60_000);
});
