// A rank of registered-segments.test.ts: registered buffers past the arena's 2 GiB
// ([Note: growing registered memory]) and collectives on them, beside the same ops on ordinary arrays.
import type { ProcessGroup } from '../../process-group.js';
import { shardRange } from '../../shard.js';
import { runShmWorker } from '../../transports/shm/launch-threads.js';
import { inputValue } from './shm-registered-cases.js';

/** What the test asks: `bigBytes` of registered memory per rank first, then ops of `count`. */
export interface SegmentsJob {
  bigBytes: number;
  count: number;
}

/** One op on registered buffers beside the same op on ordinary arrays. */
export interface SegmentsCase {
  op: string;
  result: number[];
  copied: number[];
  /** Rounds of the copying schedules the registered op started (0: in place). */
  rounds: number;
}

export interface SegmentsReport {
  /** The segment of the big buffer and of the small ones allocated after it. */
  bigSegment: number;
  smallSegment: number;
  cases: SegmentsCase[];
  /** A freed buffer's size allocated again came back at the same place, zeroed. */
  reusedZeroed: boolean;
}

function filled(array: Float32Array, rank: number): Float32Array {
  for (let i = 0; i < array.length; i++) array[i] = inputValue('f32', rank, i);
  return array;
}

async function main(group: ProcessGroup, job: SegmentsJob): Promise<SegmentsReport> {
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
  const { rank, size } = group;
  // Together past 2 GiB: the ranks after the first to allocate spill into segment 1. Nothing of
  // it is written but its last few elements, so it stays uncommitted.
  const big = group.allocate('f32', job.bigBytes / 4) as Float32Array;
  const segmentOf = (a: Float32Array) => arena.registered.segmentOf(a.buffer);
  await group.barrier().wait();
  const small = filled(group.allocate('f32', job.count) as Float32Array, rank);
  const cases: SegmentsCase[] = [];
  const run = async (
    op: string,
    registered: () => Promise<Float32Array>,
    plain: () => Promise<Float32Array>,
  ) => {
    rounds = 0;
    const result = Array.from(await registered());
    const used = rounds;
    cases.push({ op, result, copied: Array.from(await plain()), rounds: used });
  };
  await run(
    'allReduce sum, one segment',
    async () => {
      await group.allReduce(small).wait();
      return small;
    },
    async () => {
      const plain = filled(new Float32Array(job.count), rank);
      await group.allReduce(plain).wait();
      return plain;
    },
  );
  // Views at the end of every rank's big buffer: the ranks' operands lie in different segments.
  const tail = filled(big.subarray(big.length - job.count), rank);
  await run(
    'allReduce avg, mixed segments',
    async () => {
      await group.allReduce(tail, { op: 'avg' }).wait();
      return tail;
    },
    async () => {
      const plain = filled(new Float32Array(job.count), rank);
      await group.allReduce(plain, { op: 'avg' }).wait();
      return plain;
    },
  );
  const own = shardRange(job.count, size, rank);
  const input = filled(group.allocate('f32', job.count) as Float32Array, rank);
  const output = group.allocate('f32', own.count) as Float32Array;
  await run(
    'reduceScatter sum, output registered',
    async () => {
      await group.reduceScatter(input, output).wait();
      return output;
    },
    async () => {
      const plain = new Float32Array(own.count);
      await group.reduceScatter(filled(new Float32Array(job.count), rank), plain).wait();
      return plain;
    },
  );
  await run(
    'reduceScatter sum, output ordinary',
    async () => {
      const plain = new Float32Array(own.count);
      await group.reduceScatter(input, plain).wait();
      return plain;
    },
    async () => {
      const plain = new Float32Array(own.count);
      await group.reduceScatter(filled(new Float32Array(job.count), rank), plain).wait();
      return plain;
    },
  );
  // The input in segment 1 on every rank, the output at the end of each rank's big buffer: in
  // segment 0 on the first ranks, in segment 1 on the last. Each rank's own output must not choose
  // its schedule (in place on some, copying on others diverged: the GPT-2 fsdp 4 CollectiveMismatchError).
  const scattered = big.subarray(big.length - own.count);
  await run(
    'reduceScatter sum, outputs in different segments',
    async () => {
      await group.reduceScatter(input, scattered).wait();
      return scattered;
    },
    async () => {
      const plain = new Float32Array(own.count);
      await group.reduceScatter(filled(new Float32Array(job.count), rank), plain).wait();
      return plain;
    },
  );
  const gathered = group.allocate('f32', job.count) as Float32Array;
  const shard = filled(new Float32Array(own.count), rank);
  await run(
    'allGather, output registered',
    async () => {
      await group.allGather(shard, gathered).wait();
      return gathered;
    },
    async () => {
      const plain = new Float32Array(job.count);
      await group.allGather(shard, plain).wait();
      return plain;
    },
  );
  const report: SegmentsReport = {
    bigSegment: segmentOf(big),
    smallSegment: segmentOf(small),
    cases,
    reusedZeroed: false,
  };
  const at = small.byteOffset;
  group.free(small);
  const again = group.allocate('f32', job.count) as Float32Array;
  report.reusedZeroed =
    again.byteOffset === at &&
    segmentOf(again) === report.smallSegment &&
    again.every((v) => v === 0);
  for (const buffer of [again, big, input, output, gathered]) group.free(buffer);
  await group.barrier().wait();
  return report;
}

void runShmWorker(main);
