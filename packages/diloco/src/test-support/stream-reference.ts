// Streaming DiLoCo written out plainly for the tests ([Note: streamed fragments]): every rank's
// flat parameters in one process, each tensor dealt to the fragment with the fewest elements so
// far (ties: the lowest), fragment p synced after the
// steps s with s mod H = floor(p H / F), landed tau steps later with the outer Nesterov step and
// the mixing alpha x local + (1 - alpha) x global, or with `carry` the new global plus what each
// rank trained since the issue ([Note: merging a landed fragment]). In Float64Array with an exact mean (the
// reference for f32), or in Float32Array with the same element-wise arithmetic as the package and
// an averager given by the test (bit for bit, for the compressed codecs).

type FloatArray = Float32Array | Float64Array;

/** The streamed run's settings. */
export interface StreamSettings {
  readonly innerSteps: number;
  readonly fragments: number;
  readonly overlap: number;
  readonly mixing: number;
  /** `carry` in place of the mixing; absent: the mixing. */
  readonly merge?: 'carry';
  readonly lr: number;
  readonly momentum: number;
}

/** Replaces each rank's pseudo-gradient of `fragment` with the average. */
export type Average = (fragment: number, deltas: FloatArray[]) => Promise<void>;

/** The exact mean over the ranks (for Float64Array). */
export const exactMean: Average = async (_fragment, deltas) => {
  const n = deltas.length;
  for (let i = 0; i < deltas[0]!.length; i++) {
    let sum = 0;
    for (const d of deltas) sum += d[i]!;
    for (const d of deltas) d[i] = sum / n;
  }
};

export class StreamReference {
  /** Flat parameter offsets of each fragment's elements, in fragment order. */
  readonly elements: number[][];
  readonly global: FloatArray[];
  private readonly buffer: (FloatArray | null)[];
  private flight: {
    fragment: number;
    at: number;
    deltas: FloatArray[];
    /** Each rank's fragment at the issue (`carry`). */
    atIssue: FloatArray[];
  } | null = null;

  constructor(
    private readonly make: (length: number) => FloatArray,
    /** Every rank's flat parameters, moved in place. */
    readonly locals: FloatArray[],
    tensorSizes: readonly number[],
    private readonly settings: StreamSettings,
    private readonly average: Average,
  ) {
    this.elements = Array.from({ length: settings.fragments }, () => []);
    let offset = 0;
    for (const size of tensorSizes) {
      const lengths = this.elements.map((e) => e.length);
      const p = lengths.indexOf(Math.min(...lengths));
      for (let k = 0; k < size; k++) this.elements[p]!.push(offset + k);
      offset += size;
    }
    this.global = this.elements.map((e) => {
      const g = make(e.length);
      for (const [j, i] of e.entries()) g[j] = locals[0]![i]!;
      return g;
    });
    this.buffer = this.elements.map(() => null);
  }

  /** The fragment on the wire, or null. */
  get inFlight(): number | null {
    return this.flight?.fragment ?? null;
  }

  /** After inner step `step` (from 1), every rank at once. */
  async afterStep(step: number): Promise<void> {
    const { innerSteps, fragments, overlap } = this.settings;
    if (this.flight !== null && step >= this.flight.at + overlap) await this.land();
    for (let p = 0; p < fragments; p++) {
      if (step % innerSteps !== Math.floor((p * innerSteps) / fragments)) continue;
      const e = this.elements[p]!;
      const deltas = this.locals.map((local) => {
        const d = this.make(e.length);
        for (const [j, i] of e.entries()) d[j] = this.global[p]![j]! - local[i]!;
        return d;
      });
      const atIssue = this.locals.map((local) => {
        const a = this.make(e.length);
        for (const [j, i] of e.entries()) a[j] = local[i]!;
        return a;
      });
      this.flight = { fragment: p, at: step, deltas, atIssue };
      if (overlap === 0) await this.land();
    }
  }

  private async land(): Promise<void> {
    const { fragment, deltas, atIssue } = this.flight!;
    this.flight = null;
    await this.average(fragment, deltas);
    const g = deltas[0]!;
    const global = this.global[fragment]!;
    const { lr, momentum, mixing, merge, overlap } = this.settings;
    if (momentum === 0) {
      for (let j = 0; j < global.length; j++) global[j]! -= lr * g[j]!;
    } else {
      let b = this.buffer[fragment]!;
      if (b === null) {
        b = g.slice();
        this.buffer[fragment] = b;
      } else {
        for (let j = 0; j < b.length; j++) b[j] = momentum * b[j]! + g[j]!;
      }
      for (let j = 0; j < global.length; j++) global[j]! -= lr * (g[j]! + momentum * b[j]!);
    }
    for (const [r, local] of this.locals.entries()) {
      for (const [j, i] of this.elements[fragment]!.entries()) {
        if (merge === 'carry' && overlap > 0) local[i] = global[j]! + (local[i]! - atIssue[r]![j]!);
        else local[i] = mixing === 0 ? global[j]! : mixing * local[i]! + (1 - mixing) * global[j]!;
      }
    }
  }
}
