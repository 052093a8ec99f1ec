import type { ProcessGroup } from '@webshard/collectives';

/** When the gradient all-reduce runs: overlapped with backward, or all at its end. */
export type AllreduceMode = 'overlap' | 'delay';

/**
 * What `delayAllreduce: 'auto'` measured, each step the slowest rank's: each mode's best step, and
 * the median over the trial's pairs of adjacent steps of overlap's step over delay's, which
 * decides ([Note: choosing overlap by measurement]).
 */
export interface AutoTimings {
  /** Milliseconds from forward to the end of the reduction, all-reduce at the end of backward. */
  delayMs: number;
  /** The same with each bucket's all-reduce overlapped with backward. */
  overlapMs: number;
  /** Median over the pairs of overlap's step / delay's step: overlap runs when it is at most 1. */
  overlapToDelay: number;
  /** Timed steps of each mode (one pair each). */
  trials: number;
}

/**
 * [Note: choosing overlap by measurement]
 * Overlapping a bucket's all-reduce with the rest of backward only pays where communication has a
 * resource of its own: a GPU's copy engine, a NIC's DMA, a core that compute leaves idle. On the
 * CPU backend with one core a rank, the collective's packing, sends and reductions run on the
 * thread that computes backward, so overlap adds each bucket's fixed costs and hides nothing:
 * issue 31 measured 35.7 ms overlapped against 25.0 ms with `delayAllreduce` for 2 ranks over tcp.
 * `delayAllreduce: 'auto'` measures instead of guessing: after the iteration that records
 * gradient order, one untimed overlapped step (its buckets' first use: fresh buffers, first
 * sends), then `TRIALS` synchronized steps of each mode, alternating so that a burst of load on a
 * shared machine does not land on one mode only, each timed from `forward` to the end of the
 * reduction. Each step counts as the slowest rank's (an all-reduce of max over the timings, so
 * every rank decides the same mode and issues the same collectives). The i-th delayed and the i-th
 * overlapped step ran next to each other: the decision is the median over these pairs of
 * overlap's step over delay's, overlap when it is at most 1. Not each mode's fastest step: on a
 * machine shared with other work, one quiet moment that fell on one mode's step made that mode
 * win by its minimum whatever the other steps said (the constructed case in auto-mode.test.ts);
 * adjacent steps see about the same load, and the median needs most pairs to agree.
 * Both modes sum the same gradients over the same ranks; at two ranks the bits are the same, at
 * more the ring's chunks can differ and the sums with them in the last bits. Steps under `noSync`
 * are not timed, and a plan rebuilt before the choice restarts the trial.
 */
export class AutoModeTrial {
  /** Timed steps per mode. */
  static readonly TRIALS = 3;
  /** Steps the trial runs after the recording one: the untimed warm-up, then the timed ones. */
  static readonly STEPS = 1 + 2 * AutoModeTrial.TRIALS;
  private warmed = false;
  private readonly delay: number[] = [];
  private readonly overlap: number[] = [];
  private decidedMode: AllreduceMode | null = null;
  private measured: AutoTimings | null = null;

  /** The mode chosen, or null while the trial runs. */
  get decided(): AllreduceMode | null {
    return this.decidedMode;
  }

  /** What the trial measured (null until it decides). */
  get timings(): AutoTimings | null {
    return this.measured;
  }

  /** The mode the next synchronized step runs in. */
  next(): AllreduceMode {
    if (this.decidedMode !== null) return this.decidedMode;
    if (!this.warmed) return 'overlap';
    return this.delay.length <= this.overlap.length ? 'delay' : 'overlap';
  }

  /** A timed step of `mode`; true once every mode has its steps (then call `decide`). */
  record(mode: AllreduceMode, ms: number): boolean {
    if (!this.warmed) {
      this.warmed = true;
      return false;
    }
    (mode === 'delay' ? this.delay : this.overlap).push(ms);
    return this.delay.length >= AutoModeTrial.TRIALS && this.overlap.length >= AutoModeTrial.TRIALS;
  }

  /** Agree with every rank of `group` (a collective) and choose; returns the mode. */
  async decide(group: ProcessGroup): Promise<AllreduceMode> {
    const n = AutoModeTrial.TRIALS;
    const times = Float32Array.from([...this.delay.slice(0, n), ...this.overlap.slice(0, n)]);
    await group.allReduce(times, { op: 'max' }).wait();
    const delay = Array.from(times.subarray(0, n));
    const overlap = Array.from(times.subarray(n));
    const overlapToDelay = median(overlap.map((o, i) => o / delay[i]!));
    this.measured = {
      delayMs: Math.min(...delay),
      overlapMs: Math.min(...overlap),
      overlapToDelay,
      trials: n,
    };
    this.decidedMode = overlapToDelay <= 1 ? 'overlap' : 'delay';
    return this.decidedMode;
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
