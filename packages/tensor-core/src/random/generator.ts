import { ArgumentError } from '../errors.js';
import { isValidCounter } from './philox.js';

/**
 * A random stream, like `torch.Generator`: a Philox key (`seed`) and a running counter (`offset`).
 * Each random op takes `count` consecutive counters with `next(count)`, so the same seed gives the
 * same values on every backend and every rank, and two draws never share a counter.
 */
export class RandomGenerator {
  private currentSeed: number;
  private currentOffset = 0;

  constructor(seed = 0) {
    this.currentSeed = checkSeed('RandomGenerator', seed);
  }

  get seed(): number {
    return this.currentSeed;
  }

  /** The first counter the next draw will use. */
  get offset(): number {
    return this.currentOffset;
  }

  /** Restart the stream at `seed`, offset 0 (`torch.manual_seed`). */
  manualSeed(seed: number): this {
    this.currentSeed = checkSeed('manualSeed', seed);
    this.currentOffset = 0;
    return this;
  }

  /** Move to a given counter (to replay or skip a draw). */
  setOffset(offset: number): this {
    if (!isValidCounter(offset)) {
      throw new ArgumentError('setOffset', `offset ${offset} is not an integer in [0, 2^53)`);
    }
    this.currentOffset = offset;
    return this;
  }

  /** Reserve `count` counters: returns the seed and the first counter, and advances the offset. */
  next(count: number): { seed: number; offset: number } {
    const offset = this.currentOffset;
    if (!isValidCounter(offset + count)) {
      throw new ArgumentError('RandomGenerator', `offset ${offset} + ${count} passes 2^53`);
    }
    this.currentOffset = offset + count;
    return { seed: this.currentSeed, offset };
  }

  /** The state to save in a checkpoint. */
  getState(): { seed: number; offset: number } {
    return { seed: this.currentSeed, offset: this.currentOffset };
  }

  setState(state: { seed: number; offset: number }): this {
    this.currentSeed = checkSeed('setState', state.seed);
    return this.setOffset(state.offset);
  }
}

function checkSeed(op: string, seed: number): number {
  if (!isValidCounter(seed)) {
    throw new ArgumentError(op, `seed ${seed} is not an integer in [0, 2^53)`);
  }
  return seed;
}

let defaultGenerator: RandomGenerator | undefined;

/** The process-wide generator random ops use when given none (created on first use, seed 0). */
export function getDefaultGenerator(): RandomGenerator {
  defaultGenerator ??= new RandomGenerator(0);
  return defaultGenerator;
}

/** Reseed the process-wide generator, like `torch.manual_seed`. */
export function manualSeed(seed: number): RandomGenerator {
  return getDefaultGenerator().manualSeed(seed);
}
