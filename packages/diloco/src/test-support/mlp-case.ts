// The small MLP the DiLoCo tests train on every rank, its batches and its flat parameters.
import {
  createCpuBackend,
  Linear,
  mseLoss,
  RandomGenerator,
  ReLU,
  Sequential,
  tensor,
} from '@webshard/tensor-core';
import { randomValues } from './worlds.js';

export const backend = createCpuBackend();

/** The same small MLP on every rank (seeded), as each rank of a job builds it. */
export function buildModel(seed: number) {
  const generator = new RandomGenerator(seed);
  return new Sequential(
    new Linear(4, 8, { backend, generator }),
    new ReLU(),
    new Linear(8, 1, { backend, generator }),
  );
}

/** Rank `rank`'s batch at `step`: its own shard of the data. */
export async function batch(seed: number, rank: number, step: number) {
  const x = await randomValues(seed * 7919 + rank * 101 + step, 12);
  const y = await randomValues(seed * 7919 + rank * 101 + step + 50_000, 3);
  return { x: tensor(x, { backend, shape: [3, 4] }), y: tensor(y, { backend, shape: [3, 1] }) };
}

export type Model = ReturnType<typeof buildModel>;

/** Backward of rank `rank`'s batch at `step`, on fresh gradients. */
export async function backwardOn(model: Model, seed: number, rank: number, step: number) {
  const { x, y } = await batch(seed, rank, step);
  model.zeroGrad({ setToNone: true });
  const loss = mseLoss(model.call(x), y);
  await loss.backward();
}

/** Inner steps stood in for: every parameter of rank `rank` moved by seeded noise for `step`. */
export async function nudge(model: Model, seed: number, rank: number, step: number): Promise<void> {
  for (const [i, p] of model.parameters().entries()) {
    const noise = await randomValues(seed * 131 + i * 977 + rank * 17 + step * 7919, p.size);
    const values = (await p.read()) as Float32Array;
    p.write(values.map((v, k) => v + 0.05 * noise[k]!));
  }
}

/** The model's parameters, flat, in order. */
export async function flat(model: Model): Promise<Float32Array> {
  const parts = await Promise.all(model.parameters().map((p) => p.read()));
  return Float32Array.from(parts.flatMap((p) => [...p]));
}
