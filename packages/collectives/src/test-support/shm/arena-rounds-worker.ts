// A rank of arena-rounds.test.ts: a reduce-scatter whose registered inputs lie in segment 0 on
// every rank and whose registered outputs lie in segment 0 on some ranks and in segment 1 on
// others, then small all-gathers through the arena's slots, as FSDP's reduce-scatters past 2 GiB
// of registered memory are followed by the trainer's `gatherScalar` calls (issue 44).
import type { ProcessGroup } from '../../process-group.js';
import { SEGMENT_SPAN } from '../../registered-segments.js';
import { shardRange } from '../../shard.js';
import { runShmWorker } from '../../transports/shm/launch-threads.js';
import { inputValue } from './shm-registered-cases.js';

/** What the test asks: reduce-scatter `count` elements, then `gathers` all-gathers of 2 values. */
export interface ArenaRoundsJob {
  count: number;
  gathers: number;
  /**
   * Instead: the last rank takes one round of the arena more than the others, as the schedules of
   * issue 44 did, and every rank then all-gathers (the stamps must refuse it).
   */
  skew?: boolean;
}

export interface ArenaRoundsReport {
  /** The segment of this rank's reduce-scatter output. */
  outputSegment: number;
  /** The reduce-scatter's result. */
  scattered: number[];
  /** What this rank passed to each all-gather, in order: two values no other op or rank passes. */
  passed: number[][];
  /** Every all-gather's result, in order. */
  gathered: number[][];
}

async function main(group: ProcessGroup, job: ArenaRoundsJob): Promise<ArenaRoundsReport> {
  const { rank, size } = group;
  const arena = group.transport.sharedArena!;
  const passed: number[][] = [];
  const gathered: number[][] = [];
  const gather = async (k: number) => {
    const values = [1000 * (k + 1) + rank, -(1000 * (k + 1) + rank)];
    passed.push(values);
    const out = new Float32Array(2 * size);
    await group.allGather(Float32Array.from(values), out).wait();
    return Array.from(out);
  };
  if (job.skew === true) {
    await gather(0);
    if (rank === size - 1) arena.nextRound();
    await gather(1);
    throw new Error('the all-gather after the skew returned');
  }
  // Fill all three sets of slots with earlier all-gathers' values.
  for (let k = 0; k < 3; k++) gathered.push(await gather(k));
  const input = group.allocate('f32', job.count) as Float32Array;
  for (let i = 0; i < job.count; i++) input[i] = inputValue('f32', rank, i);
  const own = shardRange(job.count, size, rank);
  // The last rank's output in segment 0; rank 0 then fills what is left of segment 0 (it moves to
  // segment 1, and every later allocation of any rank with it), so the other ranks' outputs land
  // there.
  let output: Float32Array | null = null;
  if (rank === size - 1) output = group.allocate('f32', own.count) as Float32Array;
  await group.barrier().wait();
  let filler: Float32Array | null = null;
  if (rank === 0) filler = group.allocate('f32', (SEGMENT_SPAN - 2 * 65536) / 4) as Float32Array;
  await group.barrier().wait();
  output ??= group.allocate('f32', own.count) as Float32Array;
  await group.reduceScatter(input, output).wait();
  const scattered = Array.from(output);
  for (let k = 3; k < 3 + job.gathers; k++) gathered.push(await gather(k));
  const report: ArenaRoundsReport = {
    outputSegment: arena.registered.segmentOf(output.buffer),
    scattered,
    passed,
    gathered,
  };
  for (const buffer of [input, output, filler]) if (buffer !== null) group.free(buffer);
  await group.barrier().wait();
  return report;
}

void runShmWorker(main);
