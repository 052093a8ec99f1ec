import { mulberry32 } from '@webshard/tensor-core';
import { describe, expect, it, vi } from 'vitest';
import type { ProcessGroup } from '../process-group.js';
import { createLocalGroups } from '../transports/local/local-transport.js';
import { stateDigest } from './state-digest.js';
import { broadcastStateWhereDifferent, type StateValue } from './state-transfer.js';

const bitsOf = (v: StateValue) => Buffer.from(v.buffer, v.byteOffset, v.byteLength);

/** Counts the broadcasts and all-reduces a group issues. */
function countCalls(group: ProcessGroup) {
  return { broadcast: vi.spyOn(group, 'broadcast'), allReduce: vi.spyOn(group, 'allReduce') };
}

describe('stateDigest ([Note: a state digest])', () => {
  // A new seed every run, printed: a failing one becomes a case of its own.
  const seed = Date.now() >>> 0;
  it(`changes with any one bit flipped, a word moved, or the length (seed ${seed})`, () => {
    const random = mulberry32(seed);
    for (let trial = 0; trial < 200; trial++) {
      const length = 1 + Math.floor(random() * 4096);
      const words = Int32Array.from({ length }, () => Math.floor(random() * 2 ** 32) | 0);
      const digest = stateDigest(words);
      expect(stateDigest(words.slice())).toEqual(digest);
      const flipped = words.slice();
      const at = Math.floor(random() * length);
      flipped[at]! ^= 1 << Math.floor(random() * 32);
      expect(stateDigest(flipped)).not.toEqual(digest);
      if (length > 1 && words[0] !== words[length - 1]) {
        const swapped = words.slice();
        [swapped[0], swapped[length - 1]] = [words[length - 1]!, words[0]!];
        expect(stateDigest(swapped)).not.toEqual(digest);
      }
      expect(stateDigest(words.subarray(0, length - 1))).not.toEqual(digest);
    }
    // Zeros of two lengths, and -0 against +0 (a bit apart).
    expect(stateDigest(new Int32Array(4))).not.toEqual(stateDigest(new Int32Array(5)));
    const zero = new Int32Array(new Float32Array([0, 0]).buffer);
    const negative = new Int32Array(new Float32Array([0, -0]).buffer);
    expect(stateDigest(zero)).not.toEqual(stateDigest(negative));
  });
});

describe('broadcastStateWhereDifferent', () => {
  it("sends only the entries some rank lacks or holds otherwise, and every rank ends with the root's bits", async () => {
    const groups = createLocalGroups(3);
    const calls = groups.map(countCalls);
    const params = Float32Array.from({ length: 1000 }, (_, i) => Math.sin(i));
    const moments = Float32Array.from({ length: 1000 }, (_, i) => Math.cos(i));
    const root = new Map<string, StateValue>([
      ['params', params],
      ['moments', moments],
      ['step', Int32Array.of(7)],
    ]);
    // Rank 1 holds all of it; rank 2 a params with one bit flipped, the same moments, no step.
    const one = new Map<string, StateValue>([
      ['params', params.slice()],
      ['moments', moments.slice()],
      ['step', Int32Array.of(7)],
    ]);
    const flipped = params.slice();
    new Int32Array(flipped.buffer)[500]! ^= 1;
    const two = new Map<string, StateValue>([
      ['params', flipped],
      ['moments', moments.slice()],
    ]);
    const results = await Promise.all([
      broadcastStateWhereDifferent(groups[0]!, root),
      broadcastStateWhereDifferent(groups[1]!, one),
      broadcastStateWhereDifferent(groups[2]!, two),
    ]);
    for (const { state, skipped } of results) {
      expect(skipped).toEqual(['moments']);
      for (const [name, value] of root) expect(bitsOf(state.get(name)!)).toEqual(bitsOf(value));
    }
    // In place where a rank gave its arrays: rank 2's params now hold root's bits.
    expect(results[2].state.get('params')).toBe(flipped);
    // The manifest's length and text, the digests, then params and step: not the moments.
    for (const c of calls) {
      expect(c.broadcast).toHaveBeenCalledTimes(5);
      expect(c.allReduce).toHaveBeenCalledTimes(1);
    }
    await Promise.all(groups.map((g) => g.close()));
  });

  it('sends nothing but the digests when every rank holds the same state', async () => {
    const groups = createLocalGroups(2);
    const calls = groups.map(countCalls);
    const state = () =>
      new Map<string, StateValue>([
        ['global', Float32Array.from({ length: 4099 }, (_, i) => i / 7)],
        ['odd', new Uint8Array([1, 2, 3])],
      ]);
    const results = await Promise.all(groups.map((g) => broadcastStateWhereDifferent(g, state())));
    for (const { skipped } of results) expect(skipped).toEqual(['global', 'odd']);
    for (const c of calls) expect(c.broadcast).toHaveBeenCalledTimes(3);
    await Promise.all(groups.map((g) => g.close()));
  });

  it('sends everything to a rank that passes no state', async () => {
    const groups = createLocalGroups(2);
    const state = new Map<string, StateValue>([['global', Float32Array.of(1, 2, 3)]]);
    const [, received] = await Promise.all([
      broadcastStateWhereDifferent(groups[0]!, state),
      broadcastStateWhereDifferent(groups[1]!, undefined),
    ]);
    expect(received.skipped).toEqual([]);
    expect(received.state.get('global')).toEqual(Float32Array.of(1, 2, 3));
    await Promise.all(groups.map((g) => g.close()));
  });
});
