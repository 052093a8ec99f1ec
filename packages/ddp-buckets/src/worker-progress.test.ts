import { describe, expect, it } from 'vitest';
import type { KernelRankReport } from './test-support/kernel-rank.js';
import { runRankScript } from './test-support/launch.js';

// [Note: when each bucket goes] issues a bucket's all-reduce from backward and leaves it in
// flight; with `initProcessGroup({ progress: 'worker' })` it must also move while the rank's
// thread runs the next kernel, which never yields. Two processes over tcp.
describe("overlap over a group with progress: 'worker'", () => {
  it('a bucket all-reduce issued in backward completes while the next 1.2 s kernel runs', async () => {
    const { exitCode, reports, output } = await runRankScript<KernelRankReport>(
      2,
      'kernel-rank.ts',
      ['worker', '1200'],
    );
    expect(exitCode, output).toBe(0);
    for (const report of reports) {
      expect(report, output).not.toBeNull();
      const { before, kernelStart, kernelEnd } = report!;
      // The last layer's bucket went before the kernel, the first layer's after it.
      expect(before.length, output).toBe(1);
      for (const op of before) {
        // When it completed (on the thread path: when the rank's thread saw it): inside the
        // kernel, not after it; and the time is the worker's own.
        expect(op.completedAt).toBeGreaterThan(op.issuedAt);
        expect(op.completedAt, JSON.stringify(report)).toBeLessThan(kernelEnd);
        expect(op.fromWorker).toBe(true);
      }
      expect(kernelEnd - kernelStart).toBeGreaterThanOrEqual(1200);
    }
    // Both ranks hold the same averaged gradient.
    expect(reports[0]!.grad).toEqual(reports[1]!.grad);
    expect(reports[0]!.grad.some((g) => g !== 0)).toBe(true);
  }, 60_000);
});
