import { gatherScalar, type ProcessGroup } from '@webshard/collectives';
import { hostMemory } from '#platform';

/** A step record's host memory fields (see `StepRecord`). */
export interface HostMemoryFields {
  peakHostBytes?: number;
  peakHostBytesPerRank?: number[];
  hostRanksPerProcess?: number;
}

/**
 * This rank's peak resident memory, and with a group every rank's and how many ranks share this
 * rank's process (thread ranks: the numbers are the process's, for all of them). Every rank must
 * call it at the same step (two all-gathers); a rank whose platform cannot measure sends 0, and
 * nothing is reported for it.
 */
export async function hostMemoryFields(group: ProcessGroup | null): Promise<HostMemoryFields> {
  const host = await hostMemory();
  const fields: HostMemoryFields = host === null ? {} : { peakHostBytes: host.peakBytes };
  if (group === null || group.size === 1) return fields;
  const [peaks, processes] = await Promise.all([
    gatherScalar(group, host?.peakBytes ?? 0),
    gatherScalar(group, host?.processId ?? -1 - group.rank),
  ]);
  if (peaks.every((p) => p > 0)) fields.peakHostBytesPerRank = peaks;
  if (host !== null)
    fields.hostRanksPerProcess = processes.filter((p) => p === host.processId).length;
  return fields;
}
