import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import { type Backend, createCpuBackend } from '@webshard/tensor-core';

/** Run `fn` on `world` local ranks at once (one CPU backend each); every rank's result. */
export async function onLocalRanks<R>(
  world: number,
  fn: (group: ProcessGroup, backend: Backend) => Promise<R>,
): Promise<R[]> {
  const groups = createLocalGroups(world, { timeoutMs: 10_000 });
  try {
    return await Promise.all(groups.map((g) => fn(g, createCpuBackend())));
  } finally {
    await Promise.all(groups.map((g) => g.close()));
  }
}

/** Record the collectives `group` issues, in order, as their op names. */
export function recordOps(group: ProcessGroup, log: string[]): void {
  for (const op of ['allGather', 'reduceScatter', 'allReduce'] as const) {
    const original = group[op].bind(group) as (...args: unknown[]) => unknown;
    (group as unknown as Record<string, unknown>)[op] = (...args: unknown[]) => {
      log.push(op);
      return original(...args);
    };
  }
}
