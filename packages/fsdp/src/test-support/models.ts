import {
  add,
  checkpoint,
  type Backend,
  RandomGenerator,
  Linear,
  Module,
  ModuleList,
  mseLoss,
  relu,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';

/** A residual MLP block: x + fc2(relu(fc1(x))). Synchronous, like any tensor-core layer. */
export class Block extends Module<[Tensor], Tensor> {
  readonly fc1: Linear;
  readonly fc2: Linear;
  constructor(
    width: number,
    hidden: number,
    backend: Backend,
    generator: RandomGenerator,
    /** Recompute the block's inside in backward (activation checkpointing inside the unit). */
    readonly checkpointed = false,
  ) {
    super();
    this.fc1 = this.registerModule('fc1', new Linear(width, hidden, { backend, generator }));
    this.fc2 = this.registerModule('fc2', new Linear(hidden, width, { backend, generator }));
  }
  forward(x: Tensor): Tensor {
    if (this.checkpointed) return checkpoint((input: Tensor) => this.inner(input), x);
    return this.inner(x);
  }

  private inner(x: Tensor): Tensor {
    const a = this.fc1.call(x);
    const h = relu(a);
    const y = this.fc2.call(h);
    const out = add(x, y);
    a.free();
    h.free();
    y.free();
    return out;
  }
}

/** Shapes of the test network. */
export interface NetConfig {
  readonly inFeatures: number;
  readonly width: number;
  readonly hidden: number;
  readonly depth: number;
  readonly outFeatures: number;
  /** Blocks recompute their activations in backward. */
  readonly checkpoint?: boolean;
  /** Tie the head's weight to the embedding's (needs inFeatures = width = outFeatures). */
  readonly tied?: boolean;
}

export const SMALL: NetConfig = { inFeatures: 5, width: 8, hidden: 12, depth: 3, outFeatures: 3 };

/**
 * embed -> blocks -> head, with the MSE loss computed inside. Its forward awaits each block's
 * `callAsync`, so blocks may be FSDP units with async hooks.
 */
export class Net extends Module<[Tensor, Tensor], Promise<Tensor>> {
  readonly embed: Linear;
  readonly blocks: ModuleList<Module<[Tensor], unknown>>;
  readonly head: Linear;
  constructor(config: NetConfig, backend: Backend, seed = 0) {
    super();
    const generator = new RandomGenerator(seed);
    this.embed = this.registerModule(
      'embed',
      new Linear(config.inFeatures, config.width, { backend, generator }),
    );
    const blocks: Block[] = [];
    for (let i = 0; i < config.depth; i++) {
      blocks.push(
        new Block(config.width, config.hidden, backend, generator, config.checkpoint ?? false),
      );
    }
    this.blocks = this.registerModule('blocks', new ModuleList<Module<[Tensor], unknown>>(blocks));
    this.head = this.registerModule(
      'head',
      new Linear(config.width, config.outFeatures, { backend, generator }),
    );
    if (config.tied) this.head.weight = this.embed.weight;
    this.nameTensors();
  }

  /** Replace block `i` (with its FSDP unit). */
  setBlock(i: number, block: Module<[Tensor], unknown>): void {
    this.blocks.registerModule(String(i), block);
    (this.blocks as unknown as { list: Module[] }).list[i] = block;
  }

  async forward(x: Tensor, target: Tensor): Promise<Tensor> {
    let h = this.embed.call(x);
    for (const block of this.blocks) {
      const next = (await block.call(h)) as Tensor;
      h.free();
      h = next;
    }
    const out = this.head.call(h);
    h.free();
    const loss = mseLoss(out, target);
    out.free();
    return loss;
  }
}

/** Deterministic batches: `count` steps of `batch` rows. */
export function makeBatches(
  backend: Backend,
  config: NetConfig,
  steps: number,
  batch: number,
  seed = 1,
): { x: number[][]; y: number[][] }[] {
  let state = seed >>> 0;
  const next = (): number => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32 - 0.5;
  };
  void backend;
  return Array.from({ length: steps }, () => ({
    x: Array.from({ length: batch }, () => Array.from({ length: config.inFeatures }, next)),
    y: Array.from({ length: batch }, () => Array.from({ length: config.outFeatures }, next)),
  }));
}

/** Rows `[start, end)` of a batch as tensors. */
export function slice(
  backend: Backend,
  batch: { x: number[][]; y: number[][] },
  start: number,
  end: number,
): [Tensor, Tensor] {
  return [
    tensor(batch.x.slice(start, end), { backend }),
    tensor(batch.y.slice(start, end), { backend }),
  ];
}
