// One compressed average as the transport tests run it on every rank: rank r averages seeded
// values (scale 1 + r) and reports what it got and what it sent.
import type { ProcessGroup } from '@webshard/collectives';
import { CompressedAverager } from '../compressed-average.js';
import type { OuterCompression } from '../compression.js';
import { randomValues } from './worlds.js';

/** What every rank runs. */
export interface AverageJob {
  readonly compression: OuterCompression;
  readonly seed: number;
  readonly count: number;
  readonly blockSize: number;
  /** `topk` only: the share of each chunk sent. */
  readonly density?: number;
}

/** A rank's result. */
export interface AverageReport {
  readonly output: Float32Array;
  readonly bytesSent: number;
}

/** Rank `rank`'s input of `job`. */
export function averageInput(job: AverageJob, rank: number): Promise<Float32Array> {
  return randomValues(job.seed + rank, job.count, 1 + rank);
}

/** Run `job` on this rank of `group`. */
export async function runAverage(group: ProcessGroup, job: AverageJob): Promise<AverageReport> {
  const output = await averageInput(job, group.rank);
  const averager = new CompressedAverager(group, {
    compression: job.compression,
    blockSize: job.blockSize,
    ...(job.density === undefined ? {} : { density: job.density }),
  });
  const { bytesSent } = await averager.average(output);
  return { output, bytesSent };
}
