import { Tensor, createCpuBackend } from '@webshard/tensor-core';
import { roundToDType } from '@webshard/tensor-core/backend';
import type { ReduceOp } from '../kernels/reduce.js';
import type { HostData } from '../operand.js';
import type { ProcessGroup } from '../process-group.js';
import { shardRange } from '../shard.js';
import { createHostBackend } from './host-backend.js';
import type { CaseReport } from './suite.js';
import {
  bytes,
  compare,
  digest,
  DTYPES,
  dtypeOption,
  errorReport,
  fromHost,
  REDUCES,
  reduceReference,
  sizesFor,
  toHost,
  values,
} from './suite-reference.js';

/** The `cases` job: every collective, dtype and reduce op at several sizes, then the group features. */
export async function runCases(group: ProcessGroup, seed: number): Promise<CaseReport[]> {
  const { rank, size } = group;
  const reports: CaseReport[] = [];
  const record = async (
    name: string,
    body: () => Promise<{ failure: string | null; data: HostData }>,
  ) => {
    try {
      const { failure, data } = await body();
      reports.push({ name, failure, digest: digest(bytes(data)) });
    } catch (error) {
      reports.push({
        name,
        failure: `threw ${errorReport(error).name}: ${errorReport(error).message}`,
        digest: 0,
      });
    }
  };
  const counts = sizesFor(seed, size);

  for (const dtype of DTYPES) {
    for (const op of REDUCES) {
      if (op === 'avg' && dtype === 'i32') continue;
      for (const count of counts) {
        const name = `allReduce ${op} ${dtype} x${count}`;
        await record(name, async () => {
          const inputs = Array.from({ length: size }, (_, r) => values(seed, r, count, dtype, op));
          const data = toHost(dtype, inputs[rank]!);
          await group.allReduce(data, { op, ...dtypeOption(dtype) }).wait();
          return {
            failure: compare(name, fromHost(dtype, data), reduceReference(op, dtype, inputs, size)),
            data,
          };
        });
      }
    }
    for (const count of counts) {
      const op: ReduceOp = dtype === 'i32' ? 'max' : 'avg';
      const name = `reduceScatter ${op} ${dtype} x${count}`;
      await record(name, async () => {
        const inputs = Array.from({ length: size }, (_, r) => values(seed, r, count, dtype, op));
        const shard = shardRange(count, size, rank);
        const out = toHost(dtype, new Array(shard.count).fill(0));
        await group
          .reduceScatter(toHost(dtype, inputs[rank]!), out, { op, ...dtypeOption(dtype) })
          .wait();
        const expected = reduceReference(op, dtype, inputs, size).slice(
          shard.start,
          shard.start + shard.count,
        );
        return { failure: compare(name, fromHost(dtype, out), expected), data: out };
      });
    }
    for (const count of counts) {
      const name = `allGather ${dtype} x${count}`;
      await record(name, async () => {
        const full = values(seed, 99, count, dtype, 'copy');
        const shard = shardRange(count, size, rank);
        const out = toHost(dtype, new Array(count).fill(0));
        await group
          .allGather(
            toHost(dtype, full.slice(shard.start, shard.start + shard.count)),
            out,
            dtypeOption(dtype),
          )
          .wait();
        return {
          failure: compare(
            name,
            fromHost(dtype, out),
            full.map((v) => roundToDType(v, dtype)),
          ),
          data: out,
        };
      });
    }
    for (const count of dtype === 'f32' ? counts : []) {
      // The input inside the output: at its own place (an all-gather in place, nothing to copy),
      // or at the end of the output, where the other ranks' shards overwrite it.
      for (const where of ['in place', 'at the end'] as const) {
        const name = `allGather ${dtype} x${count} input ${where} of the output`;
        await record(name, async () => {
          const full = values(seed, 98, count, dtype, 'copy');
          const shard = shardRange(count, size, rank);
          const out = toHost(dtype, new Array(count).fill(0));
          const at = where === 'in place' ? shard.start : count - shard.count;
          const input = out.subarray(at, at + shard.count);
          input.set(toHost(dtype, full.slice(shard.start, shard.start + shard.count)));
          await group.allGather(input, out).wait();
          return {
            failure: compare(
              name,
              fromHost(dtype, out),
              full.map((v) => roundToDType(v, dtype)),
            ),
            data: out,
          };
        });
      }
    }
    for (const count of counts) {
      const root = count % size;
      const name = `broadcast ${dtype} x${count} from ${root}`;
      await record(name, async () => {
        const sent = values(seed, root, count, dtype, 'copy');
        const data = toHost(dtype, rank === root ? sent : new Array(count).fill(0));
        await group.broadcast(data, root, dtypeOption(dtype)).wait();
        return { failure: compare(name, fromHost(dtype, data), sent), data };
      });
    }
  }

  await record('barrier', async () => {
    await group.barrier().wait();
    return { failure: null, data: new Int32Array(0) };
  });

  await record('handles awaited out of order', async () => {
    const a = Float32Array.from(values(seed, rank, 300, 'f32', 'sum'));
    const b = Int32Array.from(values(seed + 1, rank, 17, 'i32', 'sum'));
    const c = Float32Array.from([rank]);
    const works = [group.allReduce(a), group.allReduce(b, { op: 'max' }), group.broadcast(c, 0)];
    await works[2]!.wait();
    const completedInOrder = works.every((w) => w.isCompleted);
    await works[1]!.wait();
    await works[0]!.wait();
    const expectA = reduceReference(
      'sum',
      'f32',
      Array.from({ length: size }, (_, r) => values(seed, r, 300, 'f32', 'sum')),
      size,
    );
    const expectB = reduceReference(
      'max',
      'i32',
      Array.from({ length: size }, (_, r) => values(seed + 1, r, 17, 'i32', 'sum')),
      size,
    );
    const failure =
      (completedInOrder ? null : 'later handle completed before earlier ones') ??
      compare('a', Array.from(a), expectA) ??
      compare('b', Array.from(b), expectB) ??
      compare('c', Array.from(c), [0]);
    return { failure, data: a };
  });

  await record('tensors: cpu in place, device-like written back', async () => {
    const cpu = createCpuBackend();
    const device = createHostBackend('webgpu');
    const inputs = Array.from({ length: size }, (_, r) => values(seed, r, 37, 'f32', 'sum'));
    const onCpu = Tensor.empty(cpu, [37], 'f32').write(inputs[rank]!);
    const onDevice = Tensor.empty(device, [37], 'bf16').write(inputs[rank]!);
    const gathered = Tensor.empty(device, [37], 'bf16');
    const shard = shardRange(37, size, rank);
    const mine = onDevice.view([shard.count], shard.start);
    await group.allReduce(onCpu).wait();
    await group.allGather(mine, gathered).wait();
    await group.allReduce(onDevice, { op: 'max' }).wait();
    const failure =
      compare('cpu', Array.from(await onCpu.read()), reduceReference('sum', 'f32', inputs, size)) ??
      compare(
        'gather',
        Array.from(await gathered.read()),
        inputs[0]!.map((_, i) =>
          roundToDType(inputs[Math.floor(i / Math.ceil(37 / size))]![i]!, 'bf16'),
        ),
      ) ??
      compare(
        'device',
        Array.from(await onDevice.read()),
        reduceReference('max', 'bf16', inputs, size),
      );
    return { failure, data: (await onCpu.readRaw()) as Float32Array };
  });

  await record('send and recv around a ring', async () => {
    if (size === 1) return { failure: null, data: new Float32Array(0) };
    const out = Float32Array.from([rank, rank * 10]);
    const into = new Float32Array(2);
    const right = (rank + 1) % size;
    const left = (rank + size - 1) % size;
    const sending = group.send(out, right);
    await group.recv(into, left).wait();
    await sending.wait();
    return { failure: compare('recv', Array.from(into), [left, left * 10]), data: into };
  });

  await record('the arrival hint (rule 9 of the transport contract)', async () => {
    // Straight on the transport, on a tag no group uses (groups' tags are 0 and odd).
    const { transport } = group;
    const tag = 0x7ffffffe;
    // A rank whose communication runs on a worker has no transport on this thread to ask.
    const here = (transport as { movesBytesOnWorker?: boolean }).movesBytesOnWorker !== true;
    if (size === 1 || rank > 1 || !here) return { failure: null, data: new Float32Array(0) };
    if (rank === 0) {
      await Promise.all([
        transport.send(1, tag, Uint8Array.from([1, 2, 3])),
        transport.send(1, tag, Uint8Array.from([4, 5])),
      ]);
      return { failure: null, data: new Float32Array(0) };
    }
    const first = new Uint8Array(3);
    const second = new Uint8Array(2);
    const seen: string[] = [];
    let secondReceive: Promise<void> | null = null;
    const firstReceive = transport
      .recv(0, tag, first, () => {
        seen.push(`hint with [${first.join(',')}]`);
        // Posted from the hint, before the next message is matched: it must still get it.
        secondReceive = transport.recv(0, tag, second);
      })
      .then(() => seen.push('resolved'));
    await firstReceive;
    if (secondReceive === null) secondReceive = transport.recv(0, tag, second);
    await secondReceive;
    const ours = ['local', 'shm', 'tcp', 'ws'].includes(transport.kind);
    const expected = ['hint with [1,2,3]', 'resolved'];
    const failure =
      compare('second', Array.from(second), [4, 5]) ??
      (seen.length === 1 && seen[0] === 'resolved' && !ours
        ? null
        : seen.join(' / ') === expected.join(' / ')
          ? null
          : `expected ${expected.join(' / ')}, got ${seen.join(' / ')}`);
    return { failure, data: new Float32Array(0) };
  });

  await record('sub-groups run alongside the world', async () => {
    const evens = Array.from({ length: size }, (_, r) => r).filter((r) => r % 2 === 0);
    const odds = Array.from({ length: size }, (_, r) => r).filter((r) => r % 2 === 1);
    const even = group.newGroup(evens);
    const odd = odds.length > 0 ? group.newGroup(odds) : null;
    const sub = even ?? odd;
    if (sub === null) throw new Error('rank is in neither sub-group');
    const members = rank % 2 === 0 ? evens : odds;
    const subData = Float32Array.from([rank, 1]);
    const worldData = Int32Array.from([rank + 1]);
    const works = [sub.allReduce(subData), group.allReduce(worldData, { op: 'product' })];
    await Promise.all(works.map((w) => w.wait()));
    let factorial = 1;
    for (let r = 1; r <= size; r++) factorial *= r;
    const failure =
      compare('sub', Array.from(subData), [members.reduce((a, b) => a + b, 0), members.length]) ??
      compare('world', Array.from(worldData), [factorial]) ??
      (sub.size === members.length && sub.rank === members.indexOf(rank)
        ? null
        : 'sub-group rank/size wrong');
    await sub.close();
    return { failure, data: subData };
  });
  return reports;
}
