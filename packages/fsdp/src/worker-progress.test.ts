import { describe, expect, it } from 'vitest';
import type { KernelRankReport } from './test-support/kernel-rank.js';
import { runKernelRanks } from './test-support/kernel-ranks.js';

// FSDP's prefetched all-gather (issued in a unit's forward for the next unit) and its
// reduce-scatter (issued in backward when a unit's gradients are complete) are left in flight
// while the module computes; with `initProcessGroup({ progress: 'worker' })` they must also move
// while the rank's thread runs a kernel that never yields.
describe("FSDP over a group with progress: 'worker'", () => {
  it("the next unit's prefetched gather and a unit's reduce-scatter in backward complete while a 1.2 s kernel runs", async () => {
    const { reports, output } = await runKernelRanks(['worker', '1200']);
    expect(reports.map((r) => r.rank)).toEqual([0, 1]);
    for (const report of reports) {
      const text = JSON.stringify(report);
      expect(report.kernels.map((k) => k.phase)).toEqual(['forward', 'backward']);
      const [forward, backward] = report.kernels as [
        KernelRankReport['kernels'][number],
        KernelRankReport['kernels'][number],
      ];
      // Before the forward kernel: the first unit's gather (awaited) and the last unit's,
      // prefetched and still in flight; before the backward one, the middle unit's reduce-scatter.
      expect(
        forward.before.filter((o) => o.op === 'allGather').length,
        text,
      ).toBeGreaterThanOrEqual(2);
      expect(
        backward.before.filter((o) => o.op === 'reduceScatter').length,
        text,
      ).toBeGreaterThanOrEqual(1);
      for (const kernel of report.kernels) {
        expect(kernel.end - kernel.start).toBeGreaterThanOrEqual(1200);
        for (const op of kernel.before) {
          // When it completed (on the thread path: when the rank's thread saw it): inside the
          // kernel, not after it; and the time is the worker's own.
          expect(op.completedAt, text).toBeLessThan(kernel.end);
          expect(op.fromWorker).toBe(true);
        }
      }
    }
    expect(
      reports[0]!.grad.some((g) => g !== 0),
      output,
    ).toBe(true);
  }, 60_000);

  it('with limitAllGathers: 2, both later units’ gathers, prefetched by the first, complete while its 1.2 s kernel runs', async () => {
    // Several gathers in flight at once ([Note: prefetching several units ahead]), the ranks
    // apart by 200 ms.
    const { reports, output } = await runKernelRanks(['worker', '1200', '1', '2']);
    expect(reports.map((r) => r.rank)).toEqual([0, 1]);
    for (const report of reports) {
      const text = JSON.stringify(report);
      const forward = report.kernels.find((k) => k.phase === 'forward')!;
      // The first unit's gather (awaited), the middle unit's and the last unit's, prefetched.
      const gathers = forward.before.filter((o) => o.op === 'allGather');
      expect(gathers.length, text).toBe(3);
      for (const op of gathers) {
        expect(op.completedAt, text).toBeLessThan(forward.end);
        expect(op.fromWorker).toBe(true);
      }
    }
    // The same reduced gradient, bit for bit, as without prefetching (and without the kernels).
    const plain = await runKernelRanks(['worker', '0', '1', '0']);
    for (const rank of [0, 1]) {
      expect(reports[rank]!.grad, output).toEqual(plain.reports[rank]!.grad);
    }
  }, 90_000);

  it('a peer that freezes with three gathers in flight: the other rank fails in the group’s 3 s timeout, blaming it', async () => {
    // Rank 1 stops itself (SIGSTOP) as the second step starts; rank 0 has issued the first unit's
    // gather and prefetched the two after it. The awaited gather times out naming the op and the
    // stopped rank; the prefetched ones fail too, with nobody awaiting them, and must not take the
    // process down before it reports (it exits with 3; the launcher stops rank 1 with SIGKILL).
    const { reports, output } = await runKernelRanks(['worker', '0', '1', '2', 'freeze'], 3);
    const report = reports.find((r) => r.rank === 0);
    expect(report?.error, output).toMatchObject({
      name: 'CollectiveTimeoutError',
      op: 'allGather',
      blamed: [1],
      gathersIssued: 3,
    });
    expect(report!.error!.message).toMatch(
      /^\[allGather\] rank 0 \(seq \d+\): .*rank 1 never completed allGather #\d+ \(no progress report within \d+ ms: stopped or hung\)/,
    );
    expect(report!.error!.afterMs).toBeGreaterThanOrEqual(3000);
    expect(report!.error!.afterMs).toBeLessThan(10_000);
    expect(output).not.toMatch(/Unhandled|unhandled/);
  }, 60_000);
});
