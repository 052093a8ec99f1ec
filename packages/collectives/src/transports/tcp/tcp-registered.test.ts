import { describe, expect, it } from 'vitest';
import type { ReduceOp } from '../../kernels/reduce.js';
import { ProcessGroup } from '../../process-group.js';
import { shardRange } from '../../shard.js';
import { createNetworkWorld } from '../../test-support/network-world.js';

// [Note: registered memory on the tcp transport]: an all-reduce of a buffer from
// `ProcessGroup.allocate` runs the ring in place in shared WASM memory, bit-identical to the
// copying ring on an ordinary array, whichever ranks registered theirs.

/** Deterministic, rank-dependent values with fractions that make f32 sums order-sensitive. */
function fillInput(array: Float32Array | Int32Array, rank: number): void {
  for (let i = 0; i < array.length; i++) {
    const v = Math.sin(i * 0.37 + rank * 1.3) * 1000 + rank / 3;
    array[i] = array instanceof Int32Array ? Math.round(v * 1000) : v;
  }
}

function bits(array: Float32Array | Int32Array): Int32Array {
  return new Int32Array(array.buffer, array.byteOffset, array.length);
}

/** An ordinary array of `dtype`, or, when `registered`, one from `group.allocate`. */
function makeArray(
  group: ProcessGroup,
  dtype: 'f32' | 'i32',
  count: number,
  registered: boolean,
): Float32Array | Int32Array {
  if (registered) return group.allocate(dtype, count);
  return dtype === 'i32' ? new Int32Array(count) : new Float32Array(count);
}

/**
 * `size` tcp ranks in this process with small rings (4 KiB segments, no direct path), so a few
 * thousand elements cross many segments.
 */
async function withSmallRings(
  size: number,
  body: (groups: ProcessGroup[]) => Promise<void>,
): Promise<void> {
  const world = await createNetworkWorld('tcp', size);
  const groups = world.transports.map((t) =>
    ProcessGroup.fromTransport(t, { segmentBytes: 4096, smallMessageBytes: 64 }),
  );
  try {
    await body(groups);
  } finally {
    await Promise.all(groups.map((g) => g.close()));
    await world.close();
  }
}

type Case = { dtype: 'f32' | 'i32'; op: ReduceOp; count: number };

describe('registered buffers on tcp', () => {
  for (const size of [2, 3]) {
    it(`all-reduce in place on ${size} ranks, bit-identical to the copying ring`, async () => {
      const cases: Case[] = [
        { dtype: 'f32', op: 'sum', count: 20_011 },
        { dtype: 'f32', op: 'avg', count: 4099 },
        { dtype: 'f32', op: 'max', count: 3001 },
        { dtype: 'i32', op: 'sum', count: 9001 },
      ];
      await withSmallRings(size, async (groups) => {
        for (const c of cases) {
          const ordinary = groups.map((g) => {
            const a = makeArray(g, c.dtype, c.count, false);
            fillInput(a, g.rank);
            return a;
          });
          // Rank 0 keeps an ordinary array: each rank chooses alone.
          const registered = groups.map((g) => {
            const a = makeArray(g, c.dtype, c.count, g.rank > 0);
            fillInput(a, g.rank);
            return a;
          });
          await Promise.all(groups.map((g) => g.allReduce(ordinary[g.rank]!, { op: c.op }).wait()));
          await Promise.all(
            groups.map((g) => g.allReduce(registered[g.rank]!, { op: c.op }).wait()),
          );
          for (const g of groups) {
            expect(registered[g.rank]!.buffer, `rank ${g.rank}`).toBeInstanceOf(
              g.rank === 0 ? ArrayBuffer : SharedArrayBuffer,
            );
            expect(bits(registered[g.rank]!), `${JSON.stringify(c)} rank ${g.rank}`).toEqual(
              bits(ordinary[0]!),
            );
            expect(bits(ordinary[g.rank]!)).toEqual(bits(ordinary[0]!));
          }
          for (const g of groups) if (g.rank > 0) g.free(registered[g.rank]!);
        }
      });
    });

    it(`reduce-scatter reads a registered input in place on ${size} ranks, bit-identical to the copying ring`, async () => {
      // 100_003 elements: more ring segments than staging slots, so slots are reused while
      // partial results are still being forwarded from them (3 ranks).
      const cases: Case[] = [
        { dtype: 'f32', op: 'sum', count: 100_003 },
        { dtype: 'f32', op: 'avg', count: 4099 },
        { dtype: 'f32', op: 'min', count: 3001 },
        { dtype: 'i32', op: 'product', count: 9001 },
      ];
      await withSmallRings(size, async (groups) => {
        for (const c of cases) {
          const shard = (g: ProcessGroup) => shardRange(c.count, size, g.rank).count;
          const inputs = groups.map((g) => {
            const a = makeArray(g, c.dtype, c.count, false);
            fillInput(a, g.rank);
            return a;
          });
          const expected = groups.map((g) => makeArray(g, c.dtype, shard(g), false));
          await Promise.all(
            groups.map((g) =>
              g.reduceScatter(inputs[g.rank]!, expected[g.rank]!, { op: c.op }).wait(),
            ),
          );
          // Rank 0: ordinary input; rank 1: registered input and output; rank 2: registered
          // input, ordinary output.
          const registered = groups.map((g) => {
            const a = makeArray(g, c.dtype, c.count, g.rank > 0);
            fillInput(a, g.rank);
            return a;
          });
          const outputs = groups.map((g) => makeArray(g, c.dtype, shard(g), g.rank === 1));
          await Promise.all(
            groups.map((g) =>
              g.reduceScatter(registered[g.rank]!, outputs[g.rank]!, { op: c.op }).wait(),
            ),
          );
          for (const g of groups) {
            const label = `${JSON.stringify(c)} rank ${g.rank}`;
            expect(bits(outputs[g.rank]!), label).toEqual(bits(expected[g.rank]!));
            // The input is only read.
            expect(bits(registered[g.rank]!), label).toEqual(bits(inputs[g.rank]!));
          }
          for (const g of groups) {
            if (g.rank > 0) g.free(registered[g.rank]!);
            if (g.rank === 1) g.free(outputs[g.rank]!);
          }
        }
      });
    });
  }

  it('hands out zeroed buffers that stay valid as the memory grows, and reuses freed ones zeroed', async () => {
    const world = await createNetworkWorld('tcp', 2);
    const group = ProcessGroup.fromTransport(world.transports[0]!);
    try {
      const first = group.allocate('f32', 1000);
      first.fill(7);
      const big = group.allocate('f32', 5 << 20);
      expect(big.every((v) => v === 0)).toBe(true);
      expect(first[999]).toBe(7);
      expect(first.buffer).toBeInstanceOf(SharedArrayBuffer);
      big.fill(3);
      group.free(big);
      const again = group.allocate('f32', 5 << 20);
      expect(again.byteOffset).toBe(big.byteOffset);
      // Cleared for its new owner (through the kernels' memory.fill, [Note: zeroing shared memory]).
      expect(again.every((v) => v === 0)).toBe(true);
      const halves = group.allocate('bf16', 3);
      expect(halves).toBeInstanceOf(Uint16Array);
    } finally {
      await group.close().catch(() => {});
      await world.close();
    }
  });
});
