// The seams proof (#13): ranks sharing a thread (local) or not (shm) run forward and backward with
// checkpointed activations and async hooks that await collectives; what each rank computes must be
// what the same rank computes alone.
import {
  checkpoint,
  createCpuBackend,
  RandomGenerator,
  Linear,
  mseLoss,
  relu,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import type { ProcessGroup } from '../process-group.js';

export interface RankGradients {
  /** Each parameter's gradient, by name. */
  readonly grads: Record<string, number[]>;
  /** What happened, in order: `callback` once per backward, right before `backward done`. */
  readonly log: string[];
}

/** Two backwards of a small MLP on this rank's data; with `group`, its hooks await collectives. */
export async function interleavedGradients(
  rank: number,
  group: ProcessGroup | null,
): Promise<RankGradients> {
  const backend = createCpuBackend();
  const generator = new RandomGenerator(1);
  const fc1 = new Linear(3, 8, { backend, generator });
  const fc2 = new Linear(8, 2, { backend, generator });
  const log: string[] = [];
  const yieldToOthers = async () => {
    if (group !== null) await group.barrier().wait();
  };
  if (group !== null) {
    fc1.registerForwardPreHook(async () => {
      await yieldToOthers();
      return undefined;
    });
    fc2.weight.registerPostAccumulateGradHook(async (_param, running) => {
      await group.allReduce(new Float32Array([rank])).wait();
      running.queueCallback(() => {
        log.push('callback');
      });
    });
  }
  for (let step = 0; step < 2; step++) {
    const x = tensor(
      [
        [rank, 1, -1],
        [0.5, rank * 0.25, 2],
      ],
      { backend },
    );
    const y = tensor(
      [
        [1, 0],
        [0, rank],
      ],
      { backend },
    );
    const h = (await fc1.call(x)) as Tensor;
    // The middle is recomputed in backward, under an async noGrad in the forward.
    const out = await checkpoint(async (input: Tensor) => {
      await yieldToOthers();
      return fc2.call(relu(input));
    }, h);
    const loss = mseLoss(out, y);
    if (group !== null) {
      loss.registerHook(async () => {
        await yieldToOthers();
        return undefined;
      });
    }
    await loss.backward();
    log.push('backward done');
  }
  const grads: Record<string, number[]> = {};
  for (const [name, layer] of [
    ['fc1', fc1],
    ['fc2', fc2],
  ] as const) {
    for (const [p, t] of layer.namedParameters())
      grads[`${name}.${p}`] = [...(await t.grad!.read())];
  }
  return { grads, log };
}
