import type { ProgressBoard, ProgressReport } from './progress.js';

/**
 * The progress boards of ranks that share one JavaScript realm (the `local` transport, in-process
 * tests): a poll asks each rank's answerer on a later turn of the event loop, as a rank elsewhere
 * would answer from its own loop, and waits at most the window. An answerer that returns null is
 * a rank that cannot answer (a test's stopped rank). See [Note: blaming a stalled rank].
 */
export class MemoryProgressHub {
  private readonly answerers = new Map<number, () => ProgressReport | null>();

  /** The board of `rank`; `answer` is its reply to a poll, null while it cannot reply. */
  board(rank: number, answer: () => ProgressReport | null): ProgressBoard {
    this.answerers.set(rank, answer);
    return { poll: (ranks, windowMs) => this.poll(ranks, windowMs) };
  }

  private poll(ranks: readonly number[], windowMs: number): Promise<Map<number, ProgressReport>> {
    return new Promise((resolve) => {
      const reports = new Map<number, ProgressReport>();
      const timer = setTimeout(() => resolve(reports), windowMs);
      for (const rank of ranks) {
        setTimeout(() => {
          const report = this.answerers.get(rank)?.() ?? null;
          if (report === null) return;
          reports.set(rank, report);
          if (reports.size === ranks.length) {
            clearTimeout(timer);
            resolve(reports);
          }
        }, 0);
      }
      if (ranks.length === 0) {
        clearTimeout(timer);
        resolve(reports);
      }
    });
  }
}
