import type { MediumSilence, ProgressBoard, ProgressReport } from '../progress/progress.js';
import { RendezvousError } from './errors.js';
import type { StoreClient } from './store-client.js';

/** How long one watch of the ask key stays posted before it is posted again. */
const WATCH_MS = 15_000;
/** How long a read of an answer that the store already holds may take. */
const READ_MS = 2_000;
/**
 * How long past the window a whole poll may take before the store's host is blamed: the store
 * answers the poll's own requests (add, set, the wait's timeout) within milliseconds when its
 * host runs ([Note: a silent store host]).
 */
export const STORE_SILENCE_MS = 1_000;

function isTimeout(error: unknown): error is RendezvousError {
  return error instanceof RendezvousError && error.code === 'E_TIMEOUT';
}

function validReport(value: unknown, rank: number): ProgressReport | null {
  if (typeof value !== 'object' || value === null) return null;
  const report = value as Partial<ProgressReport>;
  if (report.rank !== rank || !Array.isArray(report.ops)) return null;
  if (typeof report.reached !== 'object' || report.reached === null) return null;
  return report as ProgressReport;
}

/**
 * The progress board of the network transports, kept in the rendezvous store (whose connection
 * does not share a stalled data path's fate): see [Note: blaming a stalled rank].
 *
 * A poll takes the next ask number `k` (`add` on `<prefix>/asks`) and sets `<prefix>/ask/<k>`;
 * every rank keeps one `wait` posted on the next ask key, so the store wakes it, and it answers
 * under `<prefix>/answer/<k>/<rank>` from its event loop. The poll waits for the answers of the
 * ranks it asked, at most the window; the store's timeout lists the keys never set, which are the
 * ranks that did not answer. Asks are rare (one per deadline that passes), so each rank answers
 * every ask in turn.
 */
export class StoreProgressBoard implements ProgressBoard {
  private stopped = false;

  constructor(
    private readonly store: StoreClient,
    private readonly report: () => ProgressReport | null,
    private readonly prefix = '__progress',
    /** The rank whose process hosts the store (rank 0 in `rendezvous`). */
    private readonly hostRank = 0,
  ) {
    void this.watch();
  }

  /** Stops answering (the store connection closing stops it too). */
  stop(): void {
    this.stopped = true;
  }

  private async watch(): Promise<void> {
    let next = 1;
    while (!this.stopped) {
      try {
        await this.store.wait([`${this.prefix}/ask/${next}`], WATCH_MS);
      } catch (error) {
        if (isTimeout(error)) continue;
        return;
      }
      const report = this.report();
      if (this.stopped || report === null) return;
      const key = `${this.prefix}/answer/${next}/${this.store.rank}`;
      try {
        await this.store.set(key, JSON.stringify(report));
      } catch {
        return;
      }
      next++;
    }
  }

  /**
   * [Note: a silent store host]
   * The store lives in rank 0's process: when rank 0 is stopped (SIGSTOP, a blocked event loop),
   * its sockets stay open and every store request waits forever, a poll included, so the ranks
   * whose deadline passed used to hang instead of failing (#33 item 8: seed 50075, 4 ws processes,
   * rank 0 stopped inside a broadcast it roots). So a poll has a deadline of its own: the window
   * plus `STORE_SILENCE_MS`. A store that has not finished answering by then is silent, and the
   * poll resolves with `MediumSilence` naming rank 0, which the deadline blames like any rank that
   * does not answer. A store that is gone (its connection closed) is not silent but failed: null,
   * as before. Closing a store client has the same kind of deadline on its goodbye.
   */
  async poll(
    ranks: readonly number[],
    windowMs: number,
  ): Promise<Map<number, ProgressReport> | MediumSilence | null> {
    const limitMs = windowMs + STORE_SILENCE_MS;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const silence = new Promise<MediumSilence>((resolve) => {
      timer = setTimeout(
        () =>
          resolve({
            kind: 'silent',
            host: this.hostRank,
            detail: `the rendezvous store on rank ${this.hostRank} did not answer a progress poll within ${limitMs} ms (rank ${this.hostRank} is stopped or hung)`,
          }),
        limitMs,
      );
    });
    try {
      return await Promise.race([this.ask(ranks, windowMs), silence]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async ask(
    ranks: readonly number[],
    windowMs: number,
  ): Promise<Map<number, ProgressReport> | null> {
    const { store, prefix } = this;
    try {
      const ask = await store.add(`${prefix}/asks`, 1);
      await store.set(`${prefix}/ask/${ask}`, String(store.rank));
      const keyOf = (rank: number) => `${prefix}/answer/${ask}/${rank}`;
      let missing = new Set<string>();
      try {
        await store.wait(ranks.map(keyOf), windowMs);
      } catch (error) {
        if (!isTimeout(error)) throw error;
        missing = new Set(error.missingKeys);
      }
      const reports = new Map<number, ProgressReport>();
      const answered = ranks.filter((rank) => !missing.has(keyOf(rank)));
      const texts = await Promise.all(answered.map((rank) => store.get(keyOf(rank), READ_MS)));
      answered.forEach((rank, i) => {
        let parsed: unknown;
        try {
          parsed = JSON.parse(texts[i]!);
        } catch {
          return;
        }
        const report = validReport(parsed, rank);
        if (report !== null) reports.set(rank, report);
      });
      return reports;
    } catch {
      return null;
    }
  }
}
