/**
 * [Note: stress randomness]
 * Everything the stress harness draws comes from one seed, through two kinds of randomness that
 * every rank computes alike: a stream (`Stream`, splitmix32) for the program's structure, drawn in
 * one fixed order, and a counter-based hash (`hash3`) for the data, so any rank can compute any
 * element of any rank's operand of any op on its own, without generating the ones before it: the
 * reference of a 256 MiB all-reduce is checked element by element, in chunks, with no copy of the
 * other ranks' inputs.
 */

/** murmur3's 32-bit finalizer: a bijection on u32 that mixes every bit. */
export function mix32(x: number): number {
  let h = x >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The base of stream `(a, b)` for `hashAt`: `hashAt(hashBase(a, b), c) === hash3(a, b, c)`. */
export function hashBase(a: number, b: number): number {
  return mix32(a ^ Math.imul(b, 0x9e3779b9));
}

/** Element `c` of the stream whose base is `base`. */
export function hashAt(base: number, c: number): number {
  return mix32(base + Math.imul(c, 0x7feb352d) + 0x165667b1);
}

/** A u32 from three words, for element `c` of stream `(a, b)`. */
export function hash3(a: number, b: number, c: number): number {
  return hashAt(hashBase(a, b), c);
}

/** A key for a sub-stream: the seed and any number of small integers. */
export function deriveKey(seed: number, ...parts: number[]): number {
  let key = mix32(seed ^ 0x5bd1e995);
  for (const part of parts) key = mix32(key + Math.imul(part + 1, 0x9e3779b9));
  return key;
}

/** A seeded stream of numbers (splitmix32). */
export class Stream {
  private state: number;

  constructor(key: number) {
    this.state = key >>> 0;
  }

  /** A uniform u32. */
  u32(): number {
    this.state = (this.state + 0x9e3779b9) >>> 0;
    return mix32(this.state);
  }

  /** A uniform number in [0, 1). */
  next(): number {
    return this.u32() / 2 ** 32;
  }

  /** A uniform integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p;
  }

  /** One of `items`, by `weights` (the same length). */
  pick<T>(items: readonly T[], weights?: readonly number[]): T {
    if (weights === undefined) return items[this.int(0, items.length - 1)]!;
    const total = weights.reduce((a, b) => a + b, 0);
    let at = this.next() * total;
    for (let i = 0; i < items.length; i++) {
      at -= weights[i]!;
      if (at < 0) return items[i]!;
    }
    return items[items.length - 1]!;
  }

  /** `k` distinct integers of [0, n), ascending. */
  subset(n: number, k: number): number[] {
    const all = Array.from({ length: n }, (_, i) => i);
    for (let i = 0; i < k; i++) {
      const j = this.int(i, n - 1);
      [all[i], all[j]] = [all[j]!, all[i]!];
    }
    return all.slice(0, k).sort((a, b) => a - b);
  }
}
