import { describe, expect, it } from 'vitest';
import type { KernelRankReport } from './test-support/kernel-rank.js';
import { runRankScript } from './test-support/launch.js';

// [Note: when each bucket goes]: on a group whose communication runs on the rank's own thread, a
// bucket issued in backward moves only when that thread runs its event loop, which backward never
// did by itself: every bucket waited for the end of backward. Each gradient's hook now gives the
// buckets in flight a turn (`group.progress()`). Two processes over tcp, a model of 4 layers with
// a 400 ms kernel that never yields between each two in backward, rank 1 200 ms behind.
describe('overlap on the thread path: progress turns', () => {
  it('the last layer’s bucket completes while backward still has a kernel to run', async () => {
    const { exitCode, reports, output } = await runRankScript<KernelRankReport>(
      2,
      'kernel-rank.ts',
      ['thread', '400', '3'],
    );
    expect(exitCode, output).toBe(0);
    for (const report of reports) {
      expect(report, output).not.toBeNull();
      const { before, kernels } = report!;
      expect(kernels).toHaveLength(3);
      // The last layer's bucket went before the first kernel.
      expect(before.length, output).toBe(1);
      const [op] = before;
      expect(op!.fromWorker).toBe(false);
      // Completed at a turn between the kernels, before the third began; without the turns it
      // completed at the end of backward, after the third ended.
      expect(op!.completedAt, JSON.stringify(report)).toBeLessThan(kernels[2]!.start);
    }
    expect(reports[0]!.grad).toEqual(reports[1]!.grad);
    expect(reports[0]!.grad.some((g) => g !== 0)).toBe(true);
  }, 60_000);
});
