import { AdamW } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { DiLoCo } from './diloco.js';
import { buildModel } from './test-support/mlp-case.js';
import { closeWorld, createWorld } from './test-support/worlds.js';

// [Note: streamed fragments], progress: a rank's thread is blocked while its kernels run, and a
// collective moves only when the thread turns the event loop; `afterInnerStep` turns it once after
// each step with a fragment on the wire, so over real sockets the average finishes during the
// overlap and landing it does not wait. No timing is asserted: only whether, when landing began,
// this rank had already seen the average done (`waitMs` is 0 exactly then).

/** A kernel: the thread held for `ms`, as a CPU matmul holds it. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // spin
  }
}

describe('streamed fragments over sockets', () => {
  it('the average of a fragment in flight completes while the next inner steps hold the thread (tcp)', async () => {
    const groups = await createWorld('tcp', 2);
    const models = groups.map(() => buildModel(3));
    const dilocos = await Promise.all(
      groups.map((group, r) =>
        DiLoCo.create(models[r]!.parameters(), new AdamW(models[r]!.parameters()), {
          group,
          innerSteps: 8,
          fragments: 2,
          overlap: 4,
          compression: 'int8',
          blockSize: 8,
        }),
      ),
    );
    const landed: { step: number; waitMs: number }[] = [];
    for (let step = 1; step <= 16; step++) {
      const results = await Promise.all(
        dilocos.map(async (d) => {
          busy(20);
          return d.afterInnerStep();
        }),
      );
      for (const result of results) {
        if (result.synced) landed.push({ step, waitMs: result.waitMs });
      }
    }
    // Fragment 1 issued after steps 4 and 12 lands after 8 and 16; fragment 0 after 12 (from 8).
    expect(landed.map((l) => l.step)).toEqual([8, 8, 12, 12, 16, 16]);
    expect(landed.map((l) => l.waitMs)).toEqual([0, 0, 0, 0, 0, 0]);
    await closeWorld(groups);
  });
});
