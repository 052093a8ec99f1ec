import { ArgumentError, createCpuBackend, Tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { initProcessGroup } from '../init-process-group.js';
import { freePort } from '../launcher/launcher.js';
import { ProcessGroup } from '../process-group.js';
import { busyFor, createCommWorkerWorld } from '../test-support/comm-worker-world.js';
import { WorkerGroup } from './worker-group.js';

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

describe("initProcessGroup({ progress: 'worker' })", () => {
  for (const backend of ['tcp', 'ws'] as const) {
    it(`over ${backend}: an all-reduce and a gather issued before a 1.5 s kernel that never yields complete while it runs`, async () => {
      const world = await createCommWorkerWorld(2, {}, backend);
      try {
        const cpu = createCpuBackend();
        const count = 1 << 20;
        for (const group of world.ranks) {
          expect(group).toBeInstanceOf(WorkerGroup);
          expect(group).toBeInstanceOf(ProcessGroup);
          expect(group.transport.kind).toBe(backend);
        }
        const data = world.ranks.map((g) => new Float32Array(count).fill(g.rank + 1));
        const tensors = world.ranks.map((g) =>
          Tensor.empty(cpu, [count], 'f32').write(new Float32Array(count).fill(10 * (g.rank + 1))),
        );
        const gathered = world.ranks.map(() => Tensor.empty(cpu, [2 * 3], 'f32'));
        const shards = world.ranks.map((g) =>
          Tensor.empty(cpu, [3], 'f32').write([g.rank, g.rank, g.rank]),
        );
        // Warm the sockets and reductions, so what is measured below is the op, not the start.
        await Promise.all(world.ranks.map((g) => g.allReduce(new Float32Array(count)).wait()));
        const issuedAt = performance.timeOrigin + performance.now();
        const works = world.ranks.flatMap((g, r) => [
          g.allReduce(data[r]!),
          g.allReduce(tensors[r]!, { op: 'max' }),
          g.allGather(shards[r]!, gathered[r]!),
        ]);
        const kernelEnd = busyFor(1500);
        await Promise.all(works.map((w) => w.wait()));
        // When the workers saw each op complete, on their own clock: inside the kernel.
        for (const work of works) {
          const at = WorkerGroup.completedAt(work);
          expect(at).toBeGreaterThan(issuedAt);
          expect(at).toBeLessThan(kernelEnd);
        }
        for (const r of [0, 1]) {
          expect([data[r]![0], data[r]![count - 1]]).toEqual([3, 3]);
          const max = await tensors[r]!.read();
          expect([max[0], max[count - 1]]).toEqual([20, 20]);
          expect(Array.from(await gathered[r]!.read())).toEqual([0, 0, 0, 1, 1, 1]);
        }
      } finally {
        await world.close();
      }
    }, 60_000);
  }

  it('ranks that drift apart, one with 24 ops in flight, the other issuing them one by one late, get the reference results', async () => {
    const seed = 4801;
    console.log(`drift test seed ${seed}`);
    const world = await createCommWorkerWorld(2);
    try {
      // Sizes from a fixed sequence: small (direct exchange) and large (the ring) mixed.
      const sizes = Array.from(
        { length: 24 },
        (_, i) => 1 + ((seed * (i + 7)) % 9973) * (i % 3 === 0 ? 8 : 1),
      );
      const valuesOf = (rank: number, i: number, n: number) =>
        Float32Array.from({ length: n }, (_, k) => ((rank + 1) * (i + 1) + k) % 97);
      const [eager, late] = world.ranks as [WorkerGroup, WorkerGroup];
      const eagerData = sizes.map((n, i) => valuesOf(0, i, n));
      const eagerWorks = eagerData.map((d) => eager.allReduce(d));
      const lateData = sizes.map((n, i) => valuesOf(1, i, n));
      for (const [i, d] of lateData.entries()) {
        if (i % 4 === 0) await sleep(20);
        // Every fifth awaited at once, the others left in flight.
        const work = late.allReduce(d);
        if (i % 5 === 0) await work.wait();
      }
      await Promise.all([
        ...eagerWorks.map((w) => w.wait()),
        eager.barrier().wait(),
        late.barrier().wait(),
      ]);
      for (const [i, n] of sizes.entries()) {
        const [zero, one] = [valuesOf(0, i, n), valuesOf(1, i, n)];
        const expected = zero.map((v, k) => v + one[k]!);
        // The first element that differs, per rank (-1: none); toEqual on large arrays is slow.
        const firstDiff = (got: Float32Array) => got.findIndex((v, k) => v !== expected[k]);
        expect([i, firstDiff(eagerData[i]!), firstDiff(lateData[i]!)]).toEqual([i, -1, -1]);
      }
    } finally {
      await world.close();
    }
  }, 60_000);

  it('refuses an unknown progress mode with an ArgumentError naming the call', async () => {
    const masterPort = await freePort();
    const call = initProcessGroup({
      rank: 0,
      worldSize: 1,
      masterPort,
      token: 'progress',
      progress: 'proxy' as 'worker',
    });
    await expect(call).rejects.toBeInstanceOf(ArgumentError);
    await expect(call).rejects.toThrow(
      `[initProcessGroup] progress must be 'thread' or 'worker', got "proxy"`,
    );
  });

  it('ranks may differ in it: one on its worker, one on its thread, one world', async () => {
    const masterPort = await freePort();
    const options = { worldSize: 2, masterPort, token: 'mixed', timeoutMs: 20_000 };
    const [onWorker, onThread] = await Promise.all([
      initProcessGroup({ ...options, rank: 0, progress: 'worker' }),
      initProcessGroup({ ...options, rank: 1 }),
    ]);
    try {
      expect(onWorker).toBeInstanceOf(WorkerGroup);
      expect(onThread).not.toBeInstanceOf(WorkerGroup);
      const data = [Int32Array.from([1, 2, 3]), Int32Array.from([10, 20, 30])];
      await Promise.all([onWorker.allReduce(data[0]!).wait(), onThread.allReduce(data[1]!).wait()]);
      expect(data.map((d) => Array.from(d))).toEqual([
        [11, 22, 33],
        [11, 22, 33],
      ]);
      const sub = [onWorker.newGroup([1]), onThread.newGroup([1])];
      expect(sub[0]).toBeNull();
      const alone = Float32Array.from([5]);
      await sub[1]!.allReduce(alone).wait();
      const sent = Float32Array.from([7, 8]);
      const received = new Float32Array(2);
      await Promise.all([onWorker.send(sent, 1).wait(), onThread.recv(received, 0).wait()]);
      expect(Array.from(received)).toEqual([7, 8]);
    } finally {
      await Promise.all([onWorker.close(), onThread.close()]);
    }
  }, 60_000);
});
