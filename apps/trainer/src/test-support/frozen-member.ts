import { type Line, type Started, signalAll, stopped, until } from './cli-process.js';

/** How the processes of `freezeSecondMember` ended, and when the frozen one was dropped. */
export interface FrozenSecondMember {
  lead: Started;
  frozen: Started;
  third: Started;
  /** The first member, the frozen one and the third, then the coordinator. */
  ends: Awaited<Started['done']>[];
  /** Seconds from the frozen member's SIGSTOP to a step of the world of the two others. */
  droppedAfter: number;
}

/**
 * A job's first world of 3 in which the second member freezes itself (SIGSTOP) at its fault point
 * `stopAt` ([Note: the trainer's fault points]). The members start one at a time, each once the
 * coordinator says the one before waits, so the frozen one is member 1 (the coordinator numbers
 * members as they ask to join) and the first is rank 0, the log's writer. Once the two others have
 * logged a step as a world of 2, they are held (SIGSTOP) while the frozen one wakes and asks to
 * join again (member 3), then released; resolves when every process has ended.
 */
export async function freezeSecondMember(
  member: (env?: Record<string, string>) => Started,
  coordinator: Started,
  follow: { latest: () => Line[] },
  stopAt: string,
): Promise<FrozenSecondMember> {
  const waits = (n: number) => () =>
    new RegExp(`member ${n} waits`).test(coordinator.stdout()) ? true : null;
  const lead = member();
  await until('the first member waiting', waits(0));
  const frozen = member({ WEBSHARD_TRAINER_STOP_AT: stopAt });
  await until('the second member waiting', waits(1));
  const third = member();
  await until('the frozen member stopped', async () => ((await stopped(frozen)) ? true : null));
  const frozenAt = Date.now();
  await until(
    'a step of the world of 2',
    () => {
      const read = follow.latest();
      const changes = read.filter((line) => line.event === 'membership');
      return changes.at(-1)?.worldSize === 2 && read.at(-1)!.event === undefined ? true : null;
    },
    60_000,
  );
  const droppedAfter = (Date.now() - frozenAt) / 1000;
  // Woken once the world went on without it: it learns it was dropped and joins again.
  signalAll([lead, third], 'SIGSTOP');
  process.kill(-frozen.child.pid!, 'SIGCONT');
  await until('the woken member waiting', waits(3));
  signalAll([lead, third], 'SIGCONT');
  const ends = await Promise.all([lead, frozen, third, coordinator].map((m) => m.done));
  return { lead, frozen, third, ends, droppedAfter };
}
