import { createCpuBackend, Tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { createLocalGroups } from './transports/local/local-transport.js';

describe('operands are held until the op settles (#13 item 4)', () => {
  it('freeing a tensor operand right after issuing neither aborts the group nor changes the result', async () => {
    const groups = createLocalGroups(2);
    try {
      const results = await Promise.all(
        groups.map(async (group) => {
          const backend = createCpuBackend();
          // A collective issued first keeps the next one queued behind it.
          const warm = Tensor.empty(backend, [4]);
          warm.write([1, 1, 1, 1]);
          const first = group.allReduce(warm);
          const input = Tensor.empty(backend, [4]);
          input.write([group.rank, 1, 2, 3]);
          const output = Tensor.empty(backend, [8]);
          const keepOutput = output.detach();
          const work = group.allGather(input, output);
          input.free();
          output.free();
          await first.wait();
          await work.wait();
          const got = [...(await keepOutput.read())];
          keepOutput.free();
          warm.free();
          return { got, allocations: backend.memoryStats().allocations };
        }),
      );
      for (const r of results) {
        expect(r.got).toEqual([0, 1, 2, 3, 1, 1, 2, 3]);
        // The pinned handles went with the op: nothing is left allocated.
        expect(r.allocations).toBe(0);
      }
    } finally {
      await Promise.all(groups.map((g) => g.close()));
    }
  });
});
