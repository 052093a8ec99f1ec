import type { ProgressBoard, ProgressReport } from './progress.js';

const LINE_WORDS = 16;
/** Word of the ask counter. */
const ASK = 0;
/** Bytes of each rank's answer. */
const ANSWER_BYTES = 8192;

function answeredWord(rank: number): number {
  return (1 + rank) * LINE_WORDS;
}

function textOffset(size: number, rank: number): number {
  return (1 + size) * LINE_WORDS * 4 + rank * ANSWER_BYTES;
}

/** The shared memory of the progress boards of `size` threads (see `SharedProgressBoard`). */
export function createProgressBuffer(size: number): SharedArrayBuffer {
  return new SharedArrayBuffer(textOffset(size, size));
}

/** `Atomics.waitAsync` (ES2024; Node 16+, every current browser), typed here for the ES2022 lib. */
const waitAsync = (
  Atomics as unknown as {
    waitAsync(
      array: Int32Array,
      index: number,
      value: number,
    ): { async: boolean; value: Promise<string> | string };
  }
).waitAsync;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The progress board of ranks that are threads sharing memory (`shm`): see [Note: blaming a
 * stalled rank]. A poll adds one to the ask word and notifies it; every rank sleeps on that word
 * with `Atomics.waitAsync` (which does not keep a finished thread alive), writes its report as
 * JSON into its own slot, then stores the ask number it answered in its line. The poll reads the
 * slots of the ranks whose line reached its ask number within the window. A thread blocked in
 * `Atomics.wait`, or spinning in JavaScript, cannot answer: that is the evidence.
 */
export class SharedProgressBoard implements ProgressBoard {
  private readonly words: Int32Array;
  private readonly bytes: Uint8Array;

  constructor(
    buffer: SharedArrayBuffer,
    private readonly rank: number,
    private readonly size: number,
    private readonly report: () => ProgressReport | null,
  ) {
    this.words = new Int32Array(buffer);
    this.bytes = new Uint8Array(buffer);
    void this.watch();
  }

  private async watch(): Promise<void> {
    let seen = Atomics.load(this.words, ASK);
    for (;;) {
      const waited = waitAsync(this.words, ASK, seen);
      if (waited.async) await waited.value;
      const ask = Atomics.load(this.words, ASK);
      if (ask === seen) continue;
      seen = ask;
      const report = this.report();
      if (report === null) return;
      this.answer(report, ask);
    }
  }

  private answer(report: ProgressReport, ask: number): void {
    let text = new TextEncoder().encode(JSON.stringify(report));
    // Too many ops to list: the rest of the report is what a verdict needs most.
    if (text.byteLength > ANSWER_BYTES) {
      text = new TextEncoder().encode(JSON.stringify({ ...report, ops: report.ops.slice(0, 8) }));
    }
    if (text.byteLength > ANSWER_BYTES) return;
    const line = answeredWord(this.rank);
    this.bytes.set(text, textOffset(this.size, this.rank));
    Atomics.store(this.words, line + 1, text.byteLength);
    Atomics.store(this.words, line, ask);
    Atomics.notify(this.words, line);
  }

  async poll(ranks: readonly number[], windowMs: number): Promise<Map<number, ProgressReport>> {
    const ask = Atomics.add(this.words, ASK, 1) + 1;
    Atomics.notify(this.words, ASK);
    const until = performance.now() + windowMs;
    const answered = (rank: number) => Atomics.load(this.words, answeredWord(rank)) >= ask;
    while (!ranks.every(answered) && performance.now() < until) await sleep(2);
    const reports = new Map<number, ProgressReport>();
    for (const rank of ranks.filter(answered)) {
      const length = Atomics.load(this.words, answeredWord(rank) + 1);
      const start = textOffset(this.size, rank);
      // Copied out of shared memory first: TextDecoder refuses shared views.
      const text = new TextDecoder().decode(this.bytes.slice(start, start + length));
      try {
        const report = JSON.parse(text) as ProgressReport;
        if (report.rank === rank) reports.set(rank, report);
      } catch {
        // Torn by a newer answer written meanwhile: counted as no answer.
      }
    }
    return reports;
  }
}
