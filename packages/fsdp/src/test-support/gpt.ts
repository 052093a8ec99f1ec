import {
  type Backend,
  GPT,
  type GPTConfig,
  Module,
  RandomGenerator,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';

/** The shape of FSDP's test GPTs: tensor-core's `GPTConfig` without dropout, with biases. */
export type GptConfig = Pick<GPTConfig, 'vocabSize' | 'blockSize' | 'nLayer' | 'nHead' | 'nEmbd'>;

export const TINY_GPT: GptConfig = { vocabSize: 32, blockSize: 8, nLayer: 2, nHead: 2, nEmbd: 16 };

/**
 * tensor-core's GPT as FSDP's tests and benchmark train it: no dropout, seeded, and its forward the
 * mean loss through the GPT's `forwardAsync` (a block FSDP wraps returns a promise). The GPT's
 * children are registered here under their own names (`transformer`, `lm_head`), as the trainer's
 * `TrainModule` does, so parameters keep nanoGPT's PyTorch names and wrapping a `GPTBlock`
 * replaces it inside the GPT's own block list.
 */
export class Gpt extends Module<[Tensor, Tensor], Promise<Tensor>> {
  readonly gpt: GPT;
  constructor(
    readonly config: GptConfig,
    backend: Backend,
    seed = 0,
  ) {
    super();
    const generator = new RandomGenerator(seed);
    this.gpt = new GPT({ ...config, dropout: 0, bias: true }, { backend, generator });
    for (const [name, child] of this.gpt.namedChildren()) this.registerModule(name, child);
  }

  /** Mean cross entropy of the next token over ids [B, T] (i32) and targets [B, T]. */
  async forward(idx: Tensor, targets: Tensor): Promise<Tensor> {
    const { logits, loss } = await this.gpt.forwardAsync(idx, targets);
    logits.free();
    return loss!;
  }
}

/** Deterministic token batches: `steps` of `batch` sequences of `blockSize + 1` ids. */
export function tokenBatches(
  config: GptConfig,
  steps: number,
  batch: number,
  seed = 7,
): number[][][] {
  let state = seed >>> 0;
  const next = (): number => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state % config.vocabSize;
  };
  return Array.from({ length: steps }, () =>
    Array.from({ length: batch }, () => Array.from({ length: config.blockSize + 1 }, next)),
  );
}

/** Inputs and targets of rows `[start, end)` of a token batch. */
export function tokenSlice(
  backend: Backend,
  rows: number[][],
  start: number,
  end: number,
): [Tensor, Tensor] {
  const part = rows.slice(start, end);
  return [
    tensor(
      part.map((r) => r.slice(0, -1)),
      { backend, dtype: 'i32' },
    ),
    tensor(
      part.map((r) => r.slice(1)),
      { backend, dtype: 'i32' },
    ),
  ];
}
