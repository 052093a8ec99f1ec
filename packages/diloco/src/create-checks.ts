import type { Optimizer, Tensor } from '@webshard/tensor-core';
import type { ResolvedDilocoOptions } from './api.js';
import { DilocoArgumentError } from './errors.js';

/**
 * What `DiLoCo.create` refuses before it reads a parameter: no parameters, an inner optimizer
 * without `step()`, a parameter that is not f32, more fragments than parameter tensors.
 */
export function checkCreate(
  list: readonly Tensor[],
  inner: Pick<Optimizer<object, object>, 'step'>,
  resolved: ResolvedDilocoOptions,
): void {
  const rank = resolved.group.rank;
  if (list.length === 0) {
    throw new DilocoArgumentError({ op: 'DiLoCo', rank }, 'params', 'got no parameters');
  }
  if (typeof inner?.step !== 'function') {
    throw new DilocoArgumentError(
      { op: 'DiLoCo', rank },
      'inner',
      'the inner optimizer has no step()',
    );
  }
  for (const [i, p] of list.entries()) {
    if (p.dtype !== 'f32') {
      throw new DilocoArgumentError(
        { op: 'DiLoCo', rank },
        'params',
        `parameter ${i} (${p.name ?? 'unnamed'}) is ${p.dtype}: DiLoCo keeps f32 parameters (an f32 master under mixed precision)`,
      );
    }
  }
  if (resolved.fragments > list.length) {
    throw new DilocoArgumentError(
      { op: 'DiLoCo', rank },
      'fragments',
      `${resolved.fragments} fragments of ${list.length} parameter tensors: a fragment holds whole tensors`,
    );
  }
}

/** A sync's `weight` (default 1): a finite number >= 0, refused for `op` otherwise. */
export function checkWeight(op: string, rank: number, given: number | undefined): number {
  const weight = given ?? 1;
  if (!Number.isFinite(weight) || weight < 0) {
    throw new DilocoArgumentError(
      { op, rank },
      'weight',
      `weight must be a finite number >= 0, got ${weight}`,
    );
  }
  return weight;
}
