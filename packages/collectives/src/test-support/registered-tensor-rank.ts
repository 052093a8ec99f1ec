// A rank of tensor-registered.test.ts: collectives on CPU tensors over registered buffers
// (tensorFromHostArray over group.allocate) beside the same collectives on ordinary tensors,
// reporting both results and how many copying rounds of the shared arena each took.
import { createCpuBackend, Tensor } from '@webshard/tensor-core';
import { tensorFromHostArray } from '@webshard/tensor-core/backend';
import type { ProcessGroup } from '../process-group.js';
import { shardRange } from '../shard.js';
import { runShmWorker } from '../transports/shm/launch-threads.js';

export interface TensorCase {
  readonly op: string;
  readonly result: number[];
  readonly plain: number[];
  readonly rounds: number;
}

async function main(group: ProcessGroup, count: number): Promise<TensorCase[]> {
  const arena = group.transport.sharedArena!;
  const nextRound = arena.nextRound.bind(arena);
  let rounds = 0;
  arena.nextRound = () => {
    rounds++;
    return nextRound();
  };
  // A set of slots used as scratch without taking its round counts as one too.
  const upcomingRound = arena.upcomingRound.bind(arena);
  arena.upcomingRound = () => {
    rounds++;
    return upcomingRound();
  };
  const backend = createCpuBackend();
  const value = (i: number) => Math.fround((group.rank + 1) * 0.25 + i * 0.001);
  const registered = (n: number) => tensorFromHostArray(backend, group.allocate('f32', n));
  const plain = (n: number) => Tensor.empty(backend, [n]);
  const fill = (t: Tensor) => t.write(Array.from({ length: t.size }, (_, i) => value(i)));
  const cases: TensorCase[] = [];
  const run = async (op: string, issue: (a: Tensor, b: Tensor | null) => Promise<Tensor>) => {
    const own = shardRange(count, group.size, group.rank);
    const shapes: Record<string, [number, number]> = {
      allReduce: [count, 0],
      reduceScatter: [count, own.count],
      allGather: [own.count, count],
    };
    const [inCount, outCount] = shapes[op]!;
    const a = fill(registered(inCount));
    const b = outCount > 0 ? registered(outCount) : null;
    rounds = 0;
    const result = await issue(a, b);
    const used = rounds;
    const pa = fill(plain(inCount));
    const pb = outCount > 0 ? plain(outCount) : null;
    const expected = await issue(pa, pb);
    cases.push({
      op,
      result: [...(await result.read())],
      plain: [...(await expected.read())],
      rounds: used,
    });
  };
  await run('allReduce', async (a) => {
    await group.allReduce(a).wait();
    return a;
  });
  await run('reduceScatter', async (a, b) => {
    await group.reduceScatter(a, b!).wait();
    return b!;
  });
  await run('allGather', async (a, b) => {
    await group.allGather(a, b!).wait();
    return b!;
  });
  return cases;
}

void runShmWorker<number, TensorCase[]>(main);
