import { gatherScalars, type ProcessGroup } from '@webshard/collectives';
import { type HostMemoryFields, hostFields, hostMemory, hostMemoryValues } from '../host-memory.js';
import { type StopSignal, stopNumber, strongestStop } from '../interrupt.js';
import type { StepRecord } from '../progress.js';

/** What a step's all-gather brings back: its line's per-rank fields, the stop, the mean loss. */
export interface GatheredFields {
  fields: PerRankFields;
  /** The stop request every rank acts on (`agreedStop`'s). */
  stop: StopSignal | null;
  /** The step's loss averaged over the ranks, in rank order, in double precision. */
  meanLoss: number;
  /** Rank 0's seconds since its loop began, at the step's end: the clock of a job's budget. */
  leadSeconds: number;
}

/**
 * After a step that is not quiet: every rank's peak device bytes, step time, host memory and loss
 * for the step line, rank 0's clock for the time budget, and the stop request every rank acts on
 * (`agreedStop`'s, from `stop` as it is now): one all-gather of seven numbers a rank, so one
 * latency of the group. Five all-gathers in
 * three rounds took about 0.23 s a step on broadband-20 (40 ms one way, 4 process ranks), at every
 * loud step of a streamed DiLoCo run, outside the step's own time.
 *
 * The all-gather is issued before this resolves, so every rank issues it at the same place among
 * its collectives; `gathered` settles when every rank's numbers are in. The loop awaits it one
 * step later ([Note: a step line a step late] in loop.ts).
 */
export async function issueRankFields(
  group: ProcessGroup,
  step: {
    peakAllocated: number;
    tokensPerStep: number;
    ms: number;
    loss: number;
    seconds: number;
  },
  stop: { readonly signal: StopSignal | null } | undefined,
): Promise<{ gathered: Promise<GatheredFields> }> {
  const host = await hostMemory();
  const all = gatherScalars(group, [
    stopNumber(stop),
    step.peakAllocated,
    step.ms,
    step.loss,
    step.seconds,
    ...hostMemoryValues(host, group.rank),
  ]);
  const share = step.tokensPerStep / group.size;
  const gathered = all.then((ranks) => {
    let total = 0;
    for (const values of ranks) total += values[3]!;
    return {
      fields: {
        peakDeviceBytesPerRank: ranks.map((values) => values[1]!),
        tokensPerSecondPerRank: ranks.map((values) => (share * 1000) / values[2]!),
        ...hostFields(
          host,
          ranks.map((values) => values.slice(5)),
        ),
      },
      stop: strongestStop(ranks.map((values) => values[0]!)),
      meanLoss: total / group.size,
      leadSeconds: ranks[0]![4]!,
    };
  });
  return { gathered };
}

/** The fields of a step line that every rank's numbers make. */
export type PerRankFields = Pick<StepRecord, 'peakDeviceBytesPerRank' | 'tokensPerSecondPerRank'> &
  HostMemoryFields;
