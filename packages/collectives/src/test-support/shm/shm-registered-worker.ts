// A rank of shm-registered.test.ts: all-reduces of registered buffers (`ProcessGroup.allocate`)
// beside the same all-reduces of ordinary arrays, reporting both results and which schedule ran.
import type { ProcessGroup } from '../../process-group.js';
import { runShmWorker } from '../../transports/shm/launch-threads.js';
import { shardRange } from '../../shard.js';
import {
  inputValue,
  type RegisteredCase,
  type RegisteredJob,
  type RegisteredShardCase,
} from './shm-registered-cases.js';

async function main(group: ProcessGroup, job: RegisteredJob) {
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
  const cases: RegisteredCase[] = [];
  for (const count of job.counts) {
    for (const [dtype, op] of [
      ['f32', 'sum'],
      ['f32', 'avg'],
      ['i32', 'max'],
    ] as const) {
      for (const registered of ['all', 'rank 0 only'] as const) {
        const fill = (array: Float32Array | Int32Array) => {
          for (let i = 0; i < count; i++) array[i] = inputValue(dtype, group.rank, i);
          return array;
        };
        const mine = registered === 'all' || group.rank === 0;
        const data = fill(
          mine
            ? group.allocate(dtype, count)
            : new (dtype === 'i32' ? Int32Array : Float32Array)(count),
        );
        const plain = fill(new (dtype === 'i32' ? Int32Array : Float32Array)(count));
        rounds = 0;
        await group.allReduce(data, { op }).wait();
        const used = rounds;
        await group.allReduce(plain, { op }).wait();
        cases.push({
          count,
          op,
          dtype,
          registered,
          result: data.slice(),
          copied: plain,
          rounds: used,
        });
        if (mine) group.free(data);
      }
    }
  }
  const shards: RegisteredShardCase[] = [];
  const n = group.size;
  for (const count of job.counts) {
    const own = shardRange(count, n, group.rank);
    const filled = (array: Float32Array) => {
      for (let i = 0; i < array.length; i++) array[i] = inputValue('f32', group.rank, i);
      return array;
    };
    for (const op of [
      'reduceScatter sum',
      'reduceScatter avg, output registered',
      'reduceScatter, output inside the input',
    ] as const) {
      const input = filled(group.allocate('f32', count) as Float32Array);
      const output =
        op === 'reduceScatter avg, output registered'
          ? (group.allocate('f32', own.count) as Float32Array)
          : op === 'reduceScatter, output inside the input'
            ? input.subarray(own.start, own.start + own.count)
            : new Float32Array(own.count);
      const reduceOp = op === 'reduceScatter avg, output registered' ? 'avg' : 'sum';
      const plainInput = filled(new Float32Array(count));
      const plainOutput = new Float32Array(own.count);
      rounds = 0;
      await group.reduceScatter(input, output, { op: reduceOp }).wait();
      const used = rounds;
      await group.reduceScatter(plainInput, plainOutput, { op: reduceOp }).wait();
      shards.push({ op, count, result: output.slice(), copied: plainOutput, rounds: used });
    }
    for (const dtype of ['f32', 'bf16'] as const) {
      const output = dtype === 'f32' ? group.allocate('f32', count) : group.allocate('bf16', count);
      const plain = dtype === 'f32' ? new Float32Array(count) : new Uint16Array(count);
      const input = dtype === 'f32' ? new Float32Array(own.count) : new Uint16Array(own.count);
      for (let i = 0; i < own.count; i++)
        input[i] =
          dtype === 'f32' ? inputValue('f32', group.rank, own.start + i) : (own.start + i) & 0x7f7f;
      rounds = 0;
      await group.allGather(input, output, dtype === 'bf16' ? { dtype } : {}).wait();
      const used = rounds;
      await group.allGather(input, plain, dtype === 'bf16' ? { dtype } : {}).wait();
      shards.push({
        op: `allGather ${dtype}`,
        count,
        result: output.slice(),
        copied: plain,
        rounds: used,
      });
    }
  }
  // A freed buffer's memory is reused for the next allocation of its size.
  const first = group.allocate('f32', 1000);
  const at = first.byteOffset;
  group.free(first);
  const again = group.allocate('f32', 1000);
  return { cases, shards, reused: again.byteOffset === at, zeroed: again.every((x) => x === 0) };
}

void runShmWorker(main);
