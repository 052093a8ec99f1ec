import { type Backend, type DType, Tensor } from '@webshard/tensor-core';
import { roundToDType } from '@webshard/tensor-core/backend';
import { describeBackends } from '@webshard/tensor-core/testing';
import { expect, it } from 'vitest';
import type { ReduceOp } from './kernels/reduce.js';
import type { ProcessGroup } from './process-group.js';
import { shardRange } from './shard.js';
import { createLocalGroups } from './transports/local/local-transport.js';

// Collectives on tensors of a real tensor-core backend: the CPU backend (read and written in
// place) and, where an adapter exists, WebGPU (read from the device, communicated, written back).
// describeBackends skips WebGPU the way tensor-core's own tests do. The ranks are local (one
// thread): WebGPU tensors must not be handed SharedArrayBuffer views (see the README), and what is
// tested here is the tensor path, not the transport.

type TensorDType = Exclude<DType, 'f64'>;
const DTYPES: readonly TensorDType[] = ['f32', 'f16', 'bf16', 'i32'];

/** Deterministic values, exact in every dtype and in any summation order (quarter steps). */
function values(seed: number, rank: number, count: number, dtype: TensorDType): number[] {
  let state = (seed * 7919 + rank * 104_729 + count) >>> 0 || 1;
  return Array.from({ length: count }, () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    const u = (state >>> 0) / 4_294_967_296;
    return dtype === 'i32' ? Math.floor(u * 2001) - 1000 : (Math.floor(u * 65) - 32) / 4;
  });
}

function reduceReference(op: ReduceOp, inputs: number[][], dtype: TensorDType): number[] {
  return inputs[0]!.map((_, i) => {
    const column = inputs.map((input) => input[i]!);
    const result = op === 'max' ? Math.max(...column) : column.reduce((acc, x) => acc + x, 0);
    return roundToDType(result, dtype);
  });
}

function tensorOf(backend: Backend, dtype: TensorDType, data: readonly number[]): Tensor {
  return Tensor.empty(backend, [data.length], dtype).write(data);
}

/**
 * Runs `body` on every rank of a fresh local world and returns what each rank returns. Small
 * segments and a 256-byte direct-exchange threshold: 1031 elements take the ring.
 */
function onEveryRank<T>(size: number, body: (group: ProcessGroup) => Promise<T>): Promise<T[]> {
  const groups = createLocalGroups(size, {
    timeoutMs: 20_000,
    segmentBytes: 512,
    smallMessageBytes: 256,
  });
  return Promise.all(groups.map(body));
}

describeBackends('collectives on tensors', (ctx) => {
  // 1031: prime (shards of unequal length) and taken by the ring; 2: direct exchange, and over 3
  // ranks one rank's shard is empty.
  const counts = [1031, 2];

  for (const size of [2, 3]) {
    for (const dtype of DTYPES) {
      it(`${size} ranks, ${dtype}: allReduce (sum, max) matches the reference`, async () => {
        for (const count of counts) {
          for (const op of ['sum', 'max'] as const) {
            const inputs = Array.from({ length: size }, (_, r) => values(count, r, count, dtype));
            const results = await onEveryRank(size, async (group) => {
              const tensor = tensorOf(ctx.backend, dtype, inputs[group.rank]!);
              await group.allReduce(tensor, { op }).wait();
              return Array.from(await tensor.read());
            });
            const expected = reduceReference(op, inputs, dtype);
            for (const result of results) expect(result).toEqual(expected);
          }
        }
      });

      it(`${size} ranks, ${dtype}: reduceScatter and allGather match the reference`, async () => {
        for (const count of counts) {
          const inputs = Array.from({ length: size }, (_, r) => values(count + 1, r, count, dtype));
          const expected = reduceReference('sum', inputs, dtype);
          const results = await onEveryRank(size, async (group) => {
            const shard = shardRange(count, size, group.rank);
            const input = tensorOf(ctx.backend, dtype, inputs[group.rank]!);
            const mine = Tensor.empty(ctx.backend, [shard.count], dtype);
            await group.reduceScatter(input, mine, { op: 'sum' }).wait();
            // Gather the reduced shards back, from a view into a full-size tensor.
            const full = Tensor.empty(ctx.backend, [count], dtype);
            const gathered = Tensor.empty(ctx.backend, [count], dtype);
            const view = full.view([shard.count], shard.start);
            view.write(Array.from(await mine.read()));
            await group.allGather(view, gathered).wait();
            return {
              shard: Array.from(await mine.read()),
              gathered: Array.from(await gathered.read()),
            };
          });
          for (const [rank, result] of results.entries()) {
            const { start, count: length } = shardRange(count, size, rank);
            expect(result.shard).toEqual(expected.slice(start, start + length));
            expect(result.gathered).toEqual(expected);
          }
        }
      });

      it(`${size} ranks, ${dtype}: broadcast from every root matches the root's tensor`, async () => {
        for (let root = 0; root < size; root++) {
          const sent = values(root + 7, root, counts[0]!, dtype).map((v) => roundToDType(v, dtype));
          const results = await onEveryRank(size, async (group) => {
            const data = group.rank === root ? sent : new Array<number>(sent.length).fill(0);
            const tensor = tensorOf(ctx.backend, dtype, data);
            await group.broadcast(tensor, root).wait();
            return Array.from(await tensor.read());
          });
          for (const result of results) expect(result).toEqual(sent);
        }
      });
    }
  }

  it('reduces a view of a bf16 tensor and leaves the elements around it untouched', async () => {
    const size = 2;
    const results = await onEveryRank(size, async (group) => {
      const whole = tensorOf(ctx.backend, 'bf16', [9, 9, 9, 9, 9, 9, 9, 9]);
      const middle = whole.view([4], 2);
      middle.write([group.rank + 1, 0.5, -2, group.rank * 4]);
      await group.allReduce(middle, { op: 'sum' }).wait();
      return Array.from(await whole.read());
    });
    for (const result of results) expect(result).toEqual([9, 9, 3, 1, -4, 4, 9, 9]);
  });
});
