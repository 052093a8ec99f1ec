import { gatherScalars, type ProcessGroup } from '@webshard/collectives';
import { hostMemory } from '#platform';

export { hostMemory };

/** A step record's host memory fields (see `StepRecord`). */
export interface HostMemoryFields {
  peakHostBytes?: number;
  peakHostBytesPerRank?: number[];
  hostRanksPerProcess?: number;
}

/** This rank's host memory (null where the platform cannot measure). */
export type HostMemory = Awaited<ReturnType<typeof hostMemory>>;

/**
 * What a rank sends for the host memory fields: its peak resident bytes (0: not measured) and its
 * process (a negative number of its own where unknown, so that it shares with nobody).
 */
export function hostMemoryValues(host: HostMemory, rank: number): [number, number] {
  return [host?.peakBytes ?? 0, host?.processId ?? -1 - rank];
}

/** The fields from this rank's `host` and, with a group, every rank's `hostMemoryValues`. */
export function hostFields(
  host: HostMemory,
  ranks: readonly (readonly number[])[] | null,
): HostMemoryFields {
  const fields: HostMemoryFields = host === null ? {} : { peakHostBytes: host.peakBytes };
  if (ranks === null) return fields;
  const peaks = ranks.map((values) => values[0]!);
  if (peaks.every((p) => p > 0)) fields.peakHostBytesPerRank = peaks;
  if (host !== null) {
    fields.hostRanksPerProcess = ranks.filter((values) => values[1] === host.processId).length;
  }
  return fields;
}

/**
 * This rank's peak resident memory, and with a group every rank's and how many ranks share this
 * rank's process (thread ranks: the numbers are the process's, for all of them). Every rank must
 * call it at the same step (one all-gather); a rank whose platform cannot measure sends 0, and
 * nothing is reported for it.
 */
export async function hostMemoryFields(group: ProcessGroup | null): Promise<HostMemoryFields> {
  const host = await hostMemory();
  if (group === null || group.size === 1) return hostFields(host, null);
  return hostFields(host, await gatherScalars(group, hostMemoryValues(host, group.rank)));
}
