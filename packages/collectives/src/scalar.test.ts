import { describe, expect, it } from 'vitest';
import type { ProcessGroup } from './process-group.js';
import { averageScalar, gatherScalar, gatherScalars } from './scalar.js';
import { createLocalGroups } from './transports/local/local-transport.js';

async function onRanks<T>(size: number, fn: (group: ProcessGroup) => Promise<T>): Promise<T[]> {
  const groups = createLocalGroups(size);
  try {
    return await Promise.all(groups.map(fn));
  } finally {
    await Promise.all(groups.map((group) => group.close()));
  }
}

/** Values that an f32 transport would not carry: more than 24 bits, tiny, huge, signed zero. */
function sample(rank: number): number {
  return [0.1, 2 ** 53 - 1, 1e-310, -1e300, -0, Math.PI / 7, 1 / 3][rank % 7]! * (rank + 1);
}

describe.each([1, 2, 3, 4, 7])('scalars over %i ranks', (size) => {
  it('gatherScalar: every rank gets every value, bit for bit, in rank order', async () => {
    const expected = Array.from({ length: size }, (_, r) => sample(r));
    const results = await onRanks(size, (group) => gatherScalar(group, sample(group.rank)));
    const bits = (values: number[]) => new BigInt64Array(Float64Array.from(values).buffer);
    for (const values of results) expect(bits(values)).toEqual(bits(expected));
  });

  it("gatherScalars: every rank gets every rank's values, bit for bit, by rank, in one collective", async () => {
    const mine = (r: number) => [sample(r), sample(r + 3), -sample(r + 5)];
    const expected = Array.from({ length: size }, (_, r) => mine(r));
    const calls: number[] = [];
    const results = await onRanks(size, (group) => {
      const allGather = group.allGather.bind(group);
      group.allGather = (...args) => {
        calls.push(group.rank);
        return allGather(...args);
      };
      return gatherScalars(group, mine(group.rank));
    });
    const bits = (rows: number[][]) => new BigInt64Array(Float64Array.from(rows.flat()).buffer);
    for (const rows of results) {
      expect(rows.map((row) => row.length)).toEqual(expected.map(() => 3));
      expect(bits(rows)).toEqual(bits(expected));
    }
    // One all-gather a rank (none on one rank).
    expect(calls.length).toBe(size === 1 ? 0 : size);
  });

  it('averageScalar: the rank-order sum in double precision over the size, the same everywhere', async () => {
    let total = 0;
    for (let r = 0; r < size; r++) total += sample(r) / 3 + r;
    const expected = total / size;
    const results = await onRanks(size, (group) =>
      averageScalar(group, sample(group.rank) / 3 + group.rank),
    );
    for (const mean of results) expect(mean).toBe(expected);
  });

  it('averageScalar: a NaN or an infinity on one rank reaches every rank', async () => {
    const last = size - 1;
    for (const [bad, expected] of [
      [Number.NaN, Number.NaN],
      [Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY],
    ] as const) {
      const results = await onRanks(size, (group) =>
        averageScalar(group, group.rank === last ? bad : group.rank),
      );
      for (const mean of results) expect(mean).toBe(expected);
    }
  });
});

describe('averageScalar in a sub-group', () => {
  it('averages over the sub-group’s ranks only, after the op the world runs', async () => {
    const results = await onRanks(4, async (group) => {
      const even = group.newGroup([0, 2]);
      const odd = group.newGroup([1, 3]);
      const mine = (group.rank % 2 === 0 ? even : odd)!;
      const world = await averageScalar(group, group.rank + 0.5, { timeoutMs: 10_000 });
      return [world, await averageScalar(mine, group.rank * 10)];
    });
    expect(results).toEqual([
      [2, 10],
      [2, 20],
      [2, 10],
      [2, 20],
    ]);
  });
});
