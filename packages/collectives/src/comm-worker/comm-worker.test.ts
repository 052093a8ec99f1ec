import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Worker } from 'node:worker_threads';
import {
  CollectiveMismatchError,
  CollectiveTimeoutError,
  GroupAbortedError,
  PeerLostError,
} from '../errors.js';
import {
  busyFor,
  createCommWorkerWorld,
  type CommWorkerWorld,
} from '../test-support/comm-worker-world.js';
import { ProcessGroup } from '../process-group.js';
import { createNetworkWorld } from '../test-support/network-world.js';
import { WorkerGroup } from './worker-group.js';

import { sharedClock } from './handshake.js';

describe('WorkerGroup: collectives over tcp on a worker thread', () => {
  let world: CommWorkerWorld;
  beforeAll(async () => {
    world = await createCommWorkerWorld(2);
  }, 60_000);
  afterAll(() => world?.close(), 30_000);

  it('all-reduces, gathers, scatters and broadcasts ordinary and shared arrays', async () => {
    const results = await Promise.all(
      world.ranks.map(async (comm) => {
        const plain = new Float32Array(1000).fill(comm.rank + 1);
        const shared = comm.allocate('f32', 300_000) as Float32Array;
        shared.fill(comm.rank + 1);
        const sum = comm.allReduce(plain, { op: 'sum' });
        const avg = comm.allReduce(shared, { op: 'avg' });
        const full = new Int32Array(7);
        const mine = new Int32Array(comm.rank === 0 ? 4 : 3).fill(10 + comm.rank);
        const gather = comm.allGather(mine, full);
        const out = new Float32Array(comm.rank === 0 ? 3 : 2);
        const scatter = comm.reduceScatter(new Float32Array([1, 2, 3, 4, 5]), out, { op: 'max' });
        const root = new Int32Array([comm.rank === 1 ? 42 : 0]);
        const bcast = comm.broadcast(root, 1);
        await Promise.all([
          sum.wait(),
          avg.wait(),
          gather.wait(),
          scatter.wait(),
          bcast.wait(),
          comm.barrier().wait(),
        ]);
        return {
          sum: plain[999],
          avg: shared[123_456],
          full: [...full],
          out: [...out],
          root: root[0],
        };
      }),
    );
    expect(results[0]).toEqual({
      sum: 3,
      avg: 1.5,
      full: [10, 10, 10, 10, 11, 11, 11],
      out: [1, 2, 3],
      root: 42,
    });
    expect(results[1]).toEqual({
      sum: 3,
      avg: 1.5,
      full: [10, 10, 10, 10, 11, 11, 11],
      out: [4, 5],
      root: 42,
    });
  }, 30_000);

  it('reduces bf16 in f32 as ProcessGroup does, and refuses what is not an operand with its error', async () => {
    const bits = await Promise.all(
      world.ranks.map(async (comm) => {
        // bf16 1.5 is 0x3fc0, 2.5 is 0x4020: their sum 4 is 0x4080.
        const data = new Uint16Array(5).fill(comm.rank === 0 ? 0x3fc0 : 0x4020);
        await comm.allReduce(data, { dtype: 'bf16' }).wait();
        return data[4];
      }),
    );
    expect(bits).toEqual([0x4080, 0x4080]);
    const notAnOperand = { notAnArray: true } as unknown as Float32Array;
    expect(() => world.ranks[0]!.allReduce(notAnOperand)).toThrow(
      '[allReduce] expected a Tensor, Float32Array, Int32Array or Uint16Array',
    );
  }, 30_000);

  it('finishes a 16 MiB all-reduce issued before a 2 s kernel that never yields, before the kernel ends', async () => {
    const count = 4 << 20;
    const buffers = world.ranks.map((comm) =>
      (comm.allocate('f32', count) as Float32Array).fill(comm.rank + 1),
    );
    const plain = world.ranks.map((comm) => new Float32Array(count).fill(comm.rank + 1));
    const issuedAt = performance.timeOrigin + performance.now();
    const works = world.ranks.flatMap((comm, r) => [
      comm.allReduce(buffers[r]!, { op: 'sum' }),
      comm.allReduce(plain[r]!, { op: 'sum' }),
    ]);
    // The kernel: two seconds of this thread, no await, no yield.
    const kernelEnd = busyFor(2000);
    // Before this thread yields: the worker wrote the sums into the shared buffers themselves (no
    // copy), while the ordinary arrays wait for their one copy back, on this thread.
    expect(buffers.map((b) => [b[0], b[count - 1]])).toEqual([
      [3, 3],
      [3, 3],
    ]);
    expect(plain.map((b) => b[0])).toEqual([1, 2]);
    await Promise.all(works.map((w) => w.wait()));
    for (const work of works) {
      const at = WorkerGroup.completedAt(work);
      expect(at).toBeDefined();
      expect(at!).toBeGreaterThan(issuedAt);
      expect(at!).toBeLessThan(kernelEnd);
    }
    expect(buffers.map((b) => [b[0], b[count - 1]])).toEqual([
      [3, 3],
      [3, 3],
    ]);
    expect(plain.map((b) => [b[0], b[count - 1]])).toEqual([
      [3, 3],
      [3, 3],
    ]);
  }, 30_000);
});

describe('the single-thread path, for comparison', () => {
  it('does not finish the same all-reduce while the kernel runs: most of it is left for after', async () => {
    const world = await createNetworkWorld('tcp', 2);
    try {
      const groups = world.transports.map((t) => ProcessGroup.fromTransport(t));
      const count = 4 << 20;
      const buffers = groups.map((g) => new Float32Array(count).fill(g.rank + 1));
      // Warm the sockets and the reduce kernels, as the worker's first op above had them warm.
      await Promise.all(groups.map((g, r) => g.allReduce(buffers[r]!).wait()));
      const works = groups.map((g, r) => g.allReduce(buffers[r]!, { op: 'sum' }));
      const resolvedAt: number[] = [];
      for (const [r, w] of works.entries()) {
        void w.promise.then(() => {
          resolvedAt[r] = sharedClock();
        });
      }
      const kernelEnd = busyFor(2000);
      await Promise.all(works.map((w) => w.wait()));
      // Nothing moved while this thread was busy: the whole ring (16 MiB each way, at least 5 ms
      // at loopback speed) ran after the kernel.
      for (const at of resolvedAt) expect(at).toBeGreaterThan(kernelEnd + 3);
      expect(buffers[0]![0]).toBe(6);
      await Promise.all(groups.map((g) => g.close()));
    } finally {
      await world.close();
    }
  }, 60_000);
});

describe('WorkerGroup: failures come back as the typed errors of ProcessGroup', () => {
  it('a call that differs (count) fails both ranks with CollectiveMismatchError, then the group refuses use', async () => {
    const world = await createCommWorkerWorld(2);
    try {
      const errors = await Promise.all(
        world.ranks.map((comm) =>
          comm
            .allReduce(new Float32Array(8 + comm.rank))
            .wait()
            .then(
              () => null,
              (e: unknown) => e,
            ),
        ),
      );
      for (const error of errors) {
        expect(error).toBeInstanceOf(CollectiveMismatchError);
        expect((error as Error).message).toMatch(/^\[allReduce\] rank \d \(seq 0\)/);
      }
      expect(world.ranks[0]!.state).toBe('aborted');
      await expect(world.ranks[0]!.barrier().wait()).rejects.toBeInstanceOf(GroupAbortedError);
    } finally {
      await world.close();
    }
  }, 60_000);

  it('a rank that never calls makes the other time out, and its next call fails with that timeout', async () => {
    const world = await createCommWorkerWorld(2);
    try {
      const [zero, one] = world.ranks as [
        NonNullable<(typeof world.ranks)[0]>,
        NonNullable<(typeof world.ranks)[0]>,
      ];
      await expect(zero.barrier({ timeoutMs: 400 }).wait()).rejects.toBeInstanceOf(
        CollectiveTimeoutError,
      );
      const pending = one.barrier().wait();
      await expect(pending).rejects.toThrow(/^\[barrier\] rank 1/);
    } finally {
      await world.close();
    }
  }, 60_000);

  it('a rank whose worker dies is named by the other rank (PeerLostError) long before the deadline, and its own ops fail', async () => {
    const world = await createCommWorkerWorld(2, { timeoutMs: 20_000 });
    try {
      const [zero, one] = world.ranks as [WorkerGroup, WorkerGroup];
      const data = zero.allocate('f32', 1 << 20) as Float32Array;
      const pending = zero.allReduce(data).wait();
      // Rank 1 posts nothing before its worker dies: an op it posted reached the worker, which
      // checked it against rank 0's all-reduce and found the two calls unlike
      // (CollectiveMismatchError) when it got there before the end (a barrier once, then a
      // receive: one CI run in many each). Its op after the death must fail all the same.
      const started = performance.now();
      // The worker's private thread, reached here on purpose: a crash of the worker is what is tested.
      await (one.transport as unknown as { worker: Worker }).worker.terminate();
      const mine = one.recv(new Float32Array(4), 0).wait();
      const error = await pending.then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(PeerLostError);
      expect((error as PeerLostError).peer).toBe(1);
      expect(performance.now() - started).toBeLessThan(5000);
      await expect(mine).rejects.toThrow(/communication worker exited/);
      expect(one.state).toBe('aborted');
    } finally {
      await world.close();
    }
  }, 60_000);

  it('abort() on one rank fails the other rank’s pending op with the abort’s message', async () => {
    const world = await createCommWorkerWorld(2);
    try {
      const pending = world.ranks[1]!.allReduce(new Float32Array(4)).wait();
      world.ranks[0]!.abort('stop now');
      await expect(pending).rejects.toThrow(/stop now/);
      expect(world.ranks[1]!.state).toBe('aborted');
    } finally {
      await world.close();
    }
  }, 60_000);
});
