import { Tensor } from '@webshard/tensor-core';
import { describeBackends } from '@webshard/tensor-core/testing';
import { describe, expect, it } from 'vitest';
import { OperandStaging } from './operand-staging.js';
import { createLocalGroups } from './transports/local/local-transport.js';

// [Note: operand staging]: a group reuses its host arrays for tensors it cannot view in place.

describe('OperandStaging', () => {
  it('hands an array back to the pool when its op settles, and a lent one when done is called', () => {
    const staging = new OperandStaging();
    const a = staging.take('f16', 3);
    expect(a).toBeInstanceOf(Uint16Array);
    expect(a.length).toBe(3);
    expect(staging.stats()).toMatchObject({ bytes: 8, peakBytes: 8, arrays: 1, reuses: 0 });
    staging.recycle();
    const b = staging.take('bf16', 4);
    expect(b.buffer).toBe(a.buffer);
    const done = staging.lend(b);
    staging.recycle();
    // Still lent to a backend write: a new array, not the one waiting in the queue.
    const c = staging.take('f32', 2);
    expect(c.buffer).not.toBe(b.buffer);
    expect(staging.stats()).toMatchObject({ bytes: 16, peakBytes: 16, arrays: 2, reuses: 1 });
    staging.recycle();
    done();
    expect(staging.take('i32', 2)).toBeInstanceOf(Int32Array);
    expect(staging.take('i32', 2)).toBeInstanceOf(Int32Array);
    expect(staging.stats()).toMatchObject({ bytes: 16, arrays: 2, reuses: 3 });
    staging.recycle();
    staging.clear();
    expect(staging.stats()).toMatchObject({ bytes: 0, arrays: 0, peakBytes: 16 });
  });
});

describeBackends('operand staging of a group', (ctx) => {
  it('reuses one host array per operand size across collectives and drops them on close', async () => {
    const count = 4096;
    const groups = createLocalGroups(2, { timeoutMs: 20_000 });
    const results = await Promise.all(
      groups.map(async (group) => {
        const tensor = Tensor.empty(ctx.backend, [count], 'f32').write(
          Array.from({ length: count }, (_, i) => i + group.rank),
        );
        const shard = Tensor.empty(ctx.backend, [count / 2], 'f32');
        for (let step = 0; step < 3; step++) {
          await group.allReduce(tensor).wait();
          await group.reduceScatter(tensor, shard).wait();
        }
        expect(group.allocatesRegistered).toBe(false);
        const stats = group.stagingStats();
        const values = await tensor.read();
        await group.close();
        return { stats, closed: group.stagingStats(), last: values[count - 1] };
      }),
    );
    for (const { stats, closed, last } of results) {
      expect(last).toBe((2 * (count - 1) + 1) * 4);
      if (ctx.backend.kind === 'cpu') {
        // Read and written in place: no host copy at all.
        expect(stats).toMatchObject({ bytes: 0, peakBytes: 0, arrays: 0, reuses: 0 });
      } else {
        // One array of the full tensor and one of the shard, whatever the number of ops.
        expect(stats).toMatchObject({ bytes: count * 4 + count * 2, arrays: 2, reuses: 7 });
      }
      // `local` has no registered memory: each collective copies the operands into the work area
      // and out.
      expect(stats.stagedOps).toBe(6);
      expect(stats.stagedBytes).toBe(3 * (2 * count * 4 + (count + count / 2) * 4));
      expect(closed.bytes).toBe(0);
    }
  });
});
