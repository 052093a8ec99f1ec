import { createLocalGroups } from '@webshard/collectives';
import { describe, expect, it } from 'vitest';
import { CompressedAverager } from './compressed-average.js';
import { DilocoArgumentError } from './errors.js';
import {
  referenceTensorLevels,
  referenceTileLevels,
  referenceTiles,
} from './test-support/topk-reference.js';
import { closeWorld, newSeed, randomValues } from './test-support/worlds.js';
import { encodeSparseWithFeedback, TopkCodec } from './topk-codec.js';
import type { TopkLevels } from './topk-layout.js';

// topk on each tensor's own tiles ([Note: top-k tiles]) and SparseLoCo's per-tensor levels,
// against the float64 reference of test-support/topk-reference.ts.

/** A 2-D tensor with a side of 10 (tiles 2 wide), a 1-D one, and a 3-D one (5 columns: 1 wide). */
const SHAPES = [[12, 10], [10], [3, 4, 5]] as const;
const COUNT = 120 + 10 + 60;

function roundTrip(codec: TopkCodec, values: Float32Array): Float32Array {
  const words = new Int32Array(codec.words);
  encodeSparseWithFeedback(codec, values, null, 1, words);
  const out = new Float32Array(values.length);
  codec.decode(words, 0, out, 1);
  return out;
}

describe('topk tiles', () => {
  it('tiles each tensor on its own: tiles, k, Elias-Fano low bits and words, exactly', () => {
    // At side 64 and 1/64 ([Note: top-k indices]: k l + k + ((L - 1) >> l) + 2 k bits, l the
    // smallest): [65, 64] in 5 tiles of 13 x 64 (k 13, l 5, 129 bits); [192] in 3 runs of 64
    // (k 1, l 5, 9 bits); [128, 192] in 6 tiles of 64 x 64 (k 64, l 5, 639 bits); [7] in one
    // run (k 1, l 2, 6 bits).
    const shapes = [[65, 64], [192], [128, 192], [7]];
    const count = 65 * 64 + 192 + 128 * 192 + 7;
    const perTile = new TopkCodec(count, shapes, 4096, 1 / 64, 'tile');
    const tiles = perTile.segments.map((s) => s.tiles[0]!);
    expect(tiles.map((t) => [t.rows, t.cols, t.k, t.lowBits, t.bits])).toEqual([
      ...Array(5).fill([13, 64, 13, 5, 129]),
      ...Array(3).fill([1, 64, 1, 5, 9]),
      ...Array(6).fill([64, 64, 64, 5, 639]),
      [1, 7, 1, 2, 6],
    ]);
    // Per tile: 2 levels + the entries in whole words: 5 x 7 + 3 x 3 + 6 x 22 + 3.
    expect(perTile.words).toBe(179);
    // Per tensor: 5 level words + all its entries in whole words: (5 + 21) + (5 + 1) + (5 + 120) + (5 + 1).
    const perTensor = new TopkCodec(count, shapes, 4096, 1 / 64, 'tensor');
    expect(perTensor.segments.map((s) => s.words)).toEqual([26, 6, 125, 6]);
    expect(perTensor.words).toBe(163);
    // The tiles cover the reference's positions, in its order.
    const positions = perTensor.segments.map((s) =>
      s.tiles.map((t) => {
        const tile: number[] = [];
        for (let i = 0; i < t.rows * t.cols; i++) {
          tile.push(t.offset + Math.floor(i / t.cols) * t.stride + (i % t.cols));
        }
        return tile;
      }),
    );
    expect(positions).toEqual(referenceTiles(shapes, count, 64));
  });

  for (const levels of ['tile', 'tensor'] as const satisfies readonly TopkLevels[]) {
    it(`levels per ${levels} on tiles follow the float64 reference, feedback included`, async () => {
      const seed = newSeed(`topk tiles ${levels}`);
      // Side 4: [12, 10] in tiles of 4 x 2, [10] in runs of 2, [3, 4, 5] in tiles of 4 x 1.
      const codec = new TopkCodec(COUNT, SHAPES, 16, 0.25, levels);
      const tensors = referenceTiles(SHAPES, COUNT, 4);
      const reference = (x: Float64Array) =>
        levels === 'tile'
          ? referenceTileLevels(x, tensors.flat(), 0.25)
          : referenceTensorLevels(x, tensors, 0.25);
      const residual = new Float32Array(COUNT);
      const e = new Float64Array(COUNT);
      const words = new Int32Array(codec.words);
      for (let round = 0; round < 4; round++) {
        const values = await randomValues(seed + round, COUNT);
        // Ties and zeros: equal magnitudes in one tile, a whole tile of zeros.
        values.set([0.75, -0.75], 0);
        values.fill(0, 120, 122);
        encodeSparseWithFeedback(codec, values, residual, 0.9, words);
        for (let i = 0; i < COUNT; i++) e[i] = Math.fround(0.9 * e[i]! + values[i]!);
        const sent = reference(e);
        const got = new Float32Array(COUNT);
        codec.decode(words, 0, got, 1);
        expect(Array.from(got)).toEqual(Array.from(sent));
        for (let i = 0; i < COUNT; i++) e[i] = Math.fround(e[i]! - sent[i]!);
        expect(Array.from(residual)).toEqual(Array.from(e));
      }
    });
  }

  it('per-tensor levels send k entries of every tile, and a tensor of zeros decodes to zeros, uncounted', async () => {
    const seed = newSeed('topk tensor zeros');
    const codec = new TopkCodec(COUNT, SHAPES, 16, 0.25, 'tensor');
    const values = await randomValues(seed, COUNT);
    values.fill(0, 120, 130); // the 1-D tensor
    const words = new Int32Array(codec.words);
    encodeSparseWithFeedback(codec, values, null, 1, words);
    const out = new Float32Array(COUNT);
    const counts = new Uint32Array(COUNT);
    codec.decode(words, 0, out, 1, counts);
    expect(Array.from(out.subarray(120, 130))).toEqual(Array(10).fill(0));
    expect(counts.subarray(120, 130).every((c) => c === 0)).toBe(true);
    // [12, 10]: 15 tiles of 8, 2 entries each; [3, 4, 5]: 15 tiles of 4, 1 each.
    const sentElsewhere = counts.reduce((s, c) => s + c, 0);
    expect(sentElsewhere).toBe(15 * 2 + 15 * 1);
    // Without shapes, runs across the vector as before: the same as one flat tensor's runs.
    const flat = new TopkCodec(COUNT, null, 16, 0.25, 'tile');
    expect(Array.from(roundTrip(flat, values))).toEqual(
      Array.from(referenceTileLevels(values, referenceTiles(null, COUNT, 4)[0]!, 0.25, 4)),
    );
  });

  it('refuses values whose length is not what the shapes hold, with the op and the rank first', async () => {
    const groups = createLocalGroups(1);
    const averager = new CompressedAverager(groups[0]!, { compression: 'topk', shapes: [[3]] });
    const average = averager.average(new Float32Array(4));
    await expect(average).rejects.toThrow(DilocoArgumentError);
    await expect(averager.average(new Float32Array(4))).rejects.toThrow(
      '[average] rank 0: the shapes hold 3 elements, the values 4',
    );
    await closeWorld(groups);
  });
});
