// A rank of shm-registered.test.ts: all-reduces of registered buffers (`ProcessGroup.allocate`)
// beside the same all-reduces of ordinary arrays, reporting both results and which schedule ran.
import type { ProcessGroup } from '../../process-group.js';
import { runShmWorker } from './launch-threads.js';
import { inputValue, type RegisteredCase, type RegisteredJob } from './shm-registered-cases.js';

async function main(group: ProcessGroup, job: RegisteredJob) {
  const arena = group.transport.sharedArena!;
  const nextRound = arena.nextRound.bind(arena);
  let rounds = 0;
  arena.nextRound = () => {
    rounds++;
    return nextRound();
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
  // A freed buffer's memory is reused for the next allocation of its size.
  const first = group.allocate('f32', 1000);
  const at = first.byteOffset;
  group.free(first);
  const again = group.allocate('f32', 1000);
  return { cases, reused: again.byteOffset === at, zeroed: again.every((x) => x === 0) };
}

void runShmWorker(main);
