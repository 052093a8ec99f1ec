import { describe, expect, it } from 'vitest';
import type { KernelRankReport } from './test-support/kernel-rank.js';
import { runKernelRanks } from './test-support/kernel-ranks.js';

type Kernel = KernelRankReport['kernels'][number];

// On a group whose communication runs on the rank's own thread, a reduce-scatter issued in
// backward moves only when that thread runs its event loop; FSDP's post-accumulate hooks give the
// reductions and gathers in flight a turn ([Note: progress turns] in the collectives). Two
// processes over tcp; the first unit holds two 400 ms kernels that never yield in backward, a
// layer between them, rank 1 200 ms behind.
describe('FSDP on the thread path: progress turns', () => {
  it('the later units’ reduce-scatters complete between backward’s kernels, not at its end', async () => {
    const { reports, output } = await runKernelRanks(['thread', '400', '2']);
    expect(reports.map((r) => r.rank)).toEqual([0, 1]);
    for (const report of reports) {
      const text = JSON.stringify(report);
      expect(report.kernels.map((k) => k.phase)).toEqual([
        'forward',
        'forward',
        'backward',
        'backward',
      ]);
      const [, , first, second] = report.kernels as [Kernel, Kernel, Kernel, Kernel];
      const scatters = first.before.filter((o) => o.op === 'reduceScatter');
      expect(scatters.length, text).toBeGreaterThanOrEqual(1);
      for (const op of scatters) {
        expect(op.fromWorker).toBe(false);
        // At the turn of the layer between the kernels; without the turns, after the second ended.
        expect(op.completedAt, text).toBeLessThan(second.start);
      }
    }
    expect(
      reports[0]!.grad.some((g) => g !== 0),
      output,
    ).toBe(true);
  }, 90_000);
});
