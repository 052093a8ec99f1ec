import { roundToDType } from '@webshard/tensor-core/backend';
import { describe, expect, it } from 'vitest';
import type { ReduceOp } from '../kernels/reduce.js';
import type { CommDType, HostData } from '../operand.js';
import { shardRange } from '../shard.js';
import {
  compare,
  DTYPES,
  dtypeOption,
  digest,
  bytes,
  fromHost,
  REDUCES,
  reduceReference,
  sizesFor,
  toHost,
  values,
} from '../suites/suite-reference.js';
import { SUITE_GROUP_OPTIONS } from '../suites/suite.js';
import { createCommWorkerWorld } from '../test-support/comm-worker-world.js';
import type { WorkerGroup } from './worker-group.js';

// The collective cases of the transport suite (src/suites/suite-cases.ts: every op, dtype and
// reduce op at sizes 0, 1, primes, sizes the world size does not divide, sizes that take the
// ring), checked against the same references, over the communication worker, with ordinary
// arrays (one staging copy each way) and with the group's `allocate`d shared ones (in place, the
// path the suite itself does not take). The whole suite runs in worker-suite.test.ts.

/** `data` on shared memory when `shared`, as `WorkerGroup.allocate` hands it out. */
function place(comm: WorkerGroup, dtype: CommDType, data: HostData, shared: boolean): HostData {
  if (!shared) return data;
  const copy = comm.allocate(dtype, data.length);
  copy.set(data);
  return copy;
}

async function runCases(comm: WorkerGroup, seed: number, shared: boolean): Promise<string[]> {
  const { rank, size } = comm;
  const failures: string[] = [];
  const digests: string[] = [];
  const check = (name: string, got: HostData, expected: number[], dtype: CommDType) => {
    const failure = compare(name, fromHost(dtype, got), expected);
    if (failure !== null) failures.push(failure);
    // Every rank holds the same result, bit for bit (a reduce-scatter's shards differ).
    if (!name.startsWith('reduceScatter')) digests.push(`${name} ${digest(bytes(got))}`);
  };
  for (const dtype of DTYPES) {
    for (const count of sizesFor(seed, size)) {
      for (const op of REDUCES) {
        if (op === 'avg' && dtype === 'i32') continue;
        const inputs = Array.from({ length: size }, (_, r) => values(seed, r, count, dtype, op));
        const data = place(comm, dtype, toHost(dtype, inputs[rank]!), shared);
        await comm.allReduce(data, { op, ...dtypeOption(dtype) }).wait();
        check(
          `allReduce ${op} ${dtype} x${count}`,
          data,
          reduceReference(op, dtype, inputs, size),
          dtype,
        );
      }
      const op: ReduceOp = dtype === 'i32' ? 'max' : 'avg';
      const inputs = Array.from({ length: size }, (_, r) => values(seed, r, count, dtype, op));
      const shard = shardRange(count, size, rank);
      const out = place(comm, dtype, toHost(dtype, new Array(shard.count).fill(0)), shared);
      const input = place(comm, dtype, toHost(dtype, inputs[rank]!), shared);
      await comm.reduceScatter(input, out, { op, ...dtypeOption(dtype) }).wait();
      const reduced = reduceReference(op, dtype, inputs, size);
      check(
        `reduceScatter ${op} ${dtype} x${count}`,
        out,
        reduced.slice(shard.start, shard.start + shard.count),
        dtype,
      );

      const full = values(seed, 99, count, dtype, 'copy');
      const gathered = place(comm, dtype, toHost(dtype, new Array(count).fill(0)), shared);
      const mine = place(
        comm,
        dtype,
        toHost(dtype, full.slice(shard.start, shard.start + shard.count)),
        shared,
      );
      await comm.allGather(mine, gathered, dtypeOption(dtype)).wait();
      check(
        `allGather ${dtype} x${count}`,
        gathered,
        full.map((v) => roundToDType(v, dtype)),
        dtype,
      );

      const root = count % size;
      const sent = values(seed, root, count, dtype, 'copy');
      const data = place(
        comm,
        dtype,
        toHost(dtype, rank === root ? sent : new Array(count).fill(0)),
        shared,
      );
      await comm.broadcast(data, root, dtypeOption(dtype)).wait();
      check(`broadcast ${dtype} x${count} from ${root}`, data, sent, dtype);
    }
  }
  await comm.barrier().wait();
  expect(failures).toEqual([]);
  return digests;
}

describe('the transport suite’s collective cases over the communication worker', () => {
  for (const size of [2, 3]) {
    for (const shared of [false, true]) {
      it(`world size ${size}, ${shared ? 'shared' : 'ordinary'} arrays: every op and dtype matches the reference, bit-identical on all ranks`, async () => {
        const world = await createCommWorkerWorld(size, SUITE_GROUP_OPTIONS);
        try {
          const digests = await Promise.all(
            world.ranks.map((comm) => runCases(comm, 1000 + size, shared)),
          );
          expect(digests[0]!.length).toBeGreaterThan(100);
          for (const d of digests) expect(d).toEqual(digests[0]);
        } finally {
          await world.close();
        }
      }, 120_000);
    }
  }
});
