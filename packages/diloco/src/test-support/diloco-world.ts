// The tests' MLP on every rank of a world, each wrapped in a DiLoCo with AdamW inside.
import type { ProcessGroup } from '@webshard/collectives';
import { AdamW } from '@webshard/tensor-core';
import type { DilocoOptions } from '../api.js';
import { DiLoCo } from '../diloco.js';
import { buildModel, type Model } from './mlp-case.js';

/** One MLP built from `seed` a rank of `groups`, and its DiLoCo with `options` (and its group). */
export async function dilocoWorld(
  groups: readonly ProcessGroup[],
  seed: number,
  options: Omit<DilocoOptions, 'group'>,
): Promise<{ models: Model[]; dilocos: DiLoCo[] }> {
  const models = groups.map(() => buildModel(seed));
  const dilocos = await Promise.all(
    groups.map((group, r) =>
      DiLoCo.create(models[r]!.parameters(), new AdamW(models[r]!.parameters()), {
        group,
        ...options,
      }),
    ),
  );
  return { models, dilocos };
}
