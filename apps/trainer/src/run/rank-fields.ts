import { gatherScalars, type ProcessGroup } from '@webshard/collectives';
import { type HostMemoryFields, hostFields, hostMemory, hostMemoryValues } from '../host-memory.js';
import { type StopSignal, stopNumber, strongestStop } from '../interrupt.js';
import type { StepRecord } from '../progress.js';

/**
 * After a step that is not quiet: every rank's peak device bytes, step time and host memory for
 * the step line, and the stop request every rank acts on (`agreedStop`'s, from `stop` as it is
 * now): one all-gather of five numbers a rank, so one latency of the group. Five all-gathers in
 * three rounds took about 0.23 s a step on broadband-20 (40 ms one way, 4 process ranks), at every
 * loud step of a streamed DiLoCo run, outside the step's own time.
 */
export async function perRankFields(
  group: ProcessGroup,
  peakAllocated: number,
  tokensPerStep: number,
  ms: number,
  stop: { readonly signal: StopSignal | null } | undefined,
): Promise<{ fields: PerRankFields; stop: StopSignal | null }> {
  const host = await hostMemory();
  const ranks = await gatherScalars(group, [
    stopNumber(stop),
    peakAllocated,
    ms,
    ...hostMemoryValues(host, group.rank),
  ]);
  const share = tokensPerStep / group.size;
  const fields = {
    peakDeviceBytesPerRank: ranks.map((values) => values[1]!),
    tokensPerSecondPerRank: ranks.map((values) => (share * 1000) / values[2]!),
    ...hostFields(
      host,
      ranks.map((values) => values.slice(3)),
    ),
  };
  return { fields, stop: strongestStop(ranks.map((values) => values[0]!)) };
}

/** The fields of a step line that every rank's numbers make. */
export type PerRankFields = Pick<StepRecord, 'peakDeviceBytesPerRank' | 'tokensPerSecondPerRank'> &
  HostMemoryFields;
