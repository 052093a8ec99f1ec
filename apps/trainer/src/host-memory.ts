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
 * This rank's peak resident memory, where the platform measures it (a step line's own field; every
 * rank's come with the others' in `issueRankFields`, run/rank-fields.ts).
 */
export async function hostMemoryFields(): Promise<HostMemoryFields> {
  return hostFields(await hostMemory(), null);
}
