import { ArgumentError } from '@webshard/tensor-core';

/** How small and how large an elastic world may be (`--min-world-size`, `--max-world-size`). */
export interface WorldBounds {
  /** Fewest members the job trains with; below it the world waits, then fails. */
  readonly minWorldSize: number;
  /** Most members at once; newcomers beyond it wait for room. */
  readonly maxWorldSize: number;
}

/** The members of the next epoch, in rank order, and how they differ from the current ones. */
export interface NextMembers {
  readonly members: readonly number[];
  readonly left: readonly number[];
  readonly joined: readonly number[];
}

/** Checks world bounds: `1 <= minWorldSize <= maxWorldSize`, integers; an `ArgumentError` otherwise. */
export function checkWorldBounds(bounds: WorldBounds, op = 'elastic'): WorldBounds {
  const { minWorldSize: min, maxWorldSize: max } = bounds;
  if (!Number.isSafeInteger(min) || min < 1) {
    throw new ArgumentError(op, `minWorldSize must be an integer >= 1, got ${min}`);
  }
  if (!Number.isSafeInteger(max) || max < min) {
    throw new ArgumentError(
      op,
      `maxWorldSize must be an integer >= minWorldSize (${min}), got ${max}`,
    );
  }
  return bounds;
}

/**
 * The next epoch's members when `current` (in rank order) reached a sync point and only those in
 * `arrived` are still there, with `waiting` newcomers (ids) asking to be admitted.
 *
 * [Note: elastic rank order]
 * Survivors keep their relative order, so the new rank 0 is the oldest survivor and holds the
 * job's state (it broadcasts it to everyone, newcomers included, after every change); newcomers
 * follow in id order (ids count up in order of arrival), as many as `maxWorldSize` leaves room
 * for; the others wait for a later sync point. Every member learns the order from the coordinator,
 * so no two members can disagree about it.
 */
export function nextMembers(
  current: readonly number[],
  arrived: ReadonlySet<number>,
  waiting: readonly number[],
  bounds: WorldBounds,
): NextMembers {
  const survivors = current.filter((id) => arrived.has(id));
  const left = current.filter((id) => !arrived.has(id));
  const room = Math.max(0, bounds.maxWorldSize - survivors.length);
  const joined = [...waiting].sort((a, b) => a - b).slice(0, room);
  return { members: [...survivors, ...joined], left, joined };
}
