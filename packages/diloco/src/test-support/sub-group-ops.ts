// The ops a rank issues on the groups `group.newGroup` makes (a streamed DiLoCo's fragments' own
// groups, [Note: streamed fragments]): what each was, on which of those groups, when it was
// issued and when it completed.
import { type ProcessGroup, type Work, WorkerGroup } from '@webshard/collectives';

/** The clock `WorkerGroup.completedAt` reads (one for every thread of the process). */
export function clock(): number {
  return performance.timeOrigin + performance.now();
}

/** One op of a sub-group: its name, the sub-group (in the order they were made), its times. */
export interface OpTimes {
  readonly op: string;
  readonly group: number;
  readonly issued: number;
  completed: number | null;
}

/**
 * Record every op issued on the groups `group.newGroup` makes from now on into `ops`. With
 * `fail`, an op for which it returns true is not issued: its work rejects with `Error('lost')`.
 */
export function recordSubGroupOps(
  group: ProcessGroup,
  ops: OpTimes[],
  fail?: (op: string, group: number) => boolean,
): void {
  const newGroup = group.newGroup.bind(group);
  let made = 0;
  group.newGroup = (...args: Parameters<ProcessGroup['newGroup']>) => {
    const sub = newGroup(...args);
    if (sub === null) return sub;
    const index = made++;
    for (const name of ['send', 'recv', 'allGather', 'allReduce', 'reduceScatter'] as const) {
      const call = (sub[name] as (...a: unknown[]) => Work).bind(sub);
      (sub as unknown as Record<string, unknown>)[name] = (...a: unknown[]) => {
        const times: OpTimes = { op: name, group: index, issued: clock(), completed: null };
        ops.push(times);
        if (fail?.(name, index)) return { wait: () => Promise.reject(new Error('lost')) } as Work;
        const work = call(...a);
        void work.wait().then(
          // The worker's time when it ran the op; else (the rank's thread) when it settled here.
          () => {
            times.completed = WorkerGroup.completedAt(work) ?? clock();
          },
          () => {},
        );
        return work;
      };
    }
    return sub;
  };
}
