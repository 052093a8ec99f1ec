import {
  add,
  arange,
  type Backend,
  CausalSelfAttention,
  copy_,
  crossEntropy,
  Embedding,
  GELU,
  RandomGenerator,
  keep,
  LayerNorm,
  Linear,
  Module,
  ModuleList,
  randn,
  reshape,
  type Tensor,
  tensor,
  tidy,
} from '@webshard/tensor-core';

/** A nanoGPT-shaped model for FSDP's tests and benchmark (no dropout). */
export interface GptConfig {
  readonly vocabSize: number;
  readonly blockSize: number;
  readonly nLayer: number;
  readonly nHead: number;
  readonly nEmbd: number;
}

export const TINY_GPT: GptConfig = { vocabSize: 32, blockSize: 8, nLayer: 2, nHead: 2, nEmbd: 16 };

/** x + attn(ln_1(x)), then + mlp(ln_2(x)): synchronous, so a unit wraps it whole. */
export class GptBlock extends Module<[Tensor], Tensor> {
  readonly ln1: LayerNorm;
  readonly attn: CausalSelfAttention;
  readonly ln2: LayerNorm;
  readonly fc: Linear;
  readonly gelu = new GELU();
  readonly proj: Linear;
  constructor(c: GptConfig, backend: Backend, generator: RandomGenerator) {
    super();
    this.ln1 = this.registerModule('ln_1', new LayerNorm(c.nEmbd, { backend }));
    this.attn = this.registerModule(
      'attn',
      new CausalSelfAttention({ backend, generator, nEmbd: c.nEmbd, nHead: c.nHead }),
    );
    this.ln2 = this.registerModule('ln_2', new LayerNorm(c.nEmbd, { backend }));
    this.fc = this.registerModule('c_fc', new Linear(c.nEmbd, 4 * c.nEmbd, { backend, generator }));
    this.registerModule('gelu', this.gelu);
    this.proj = this.registerModule(
      'c_proj',
      new Linear(4 * c.nEmbd, c.nEmbd, { backend, generator }),
    );
  }
  forward(x: Tensor): Tensor {
    return tidy(() => {
      const h = add(x, this.attn.call(this.ln1.call(x)));
      return add(h, this.proj.call(this.gelu.call(this.fc.call(this.ln2.call(h)))));
    });
  }
}

/** Token and position embeddings, blocks, final norm, and `lm_head` tied to `wte`. */
export class Gpt extends Module<[Tensor, Tensor], Promise<Tensor>> {
  readonly wte: Embedding;
  readonly wpe: Embedding;
  readonly blocks: ModuleList<Module<[Tensor], unknown>>;
  readonly lnF: LayerNorm;
  readonly lmHead: Linear;
  private readonly positions = new Map<Backend, Tensor>();
  constructor(
    readonly config: GptConfig,
    backend: Backend,
    seed = 0,
  ) {
    super();
    const generator = new RandomGenerator(seed);
    this.wte = this.registerModule(
      'wte',
      new Embedding(config.vocabSize, config.nEmbd, { backend }),
    );
    this.wpe = this.registerModule(
      'wpe',
      new Embedding(config.blockSize, config.nEmbd, { backend }),
    );
    this.blocks = this.registerModule(
      'h',
      new ModuleList<Module<[Tensor], unknown>>(
        Array.from({ length: config.nLayer }, () => new GptBlock(config, backend, generator)),
      ),
    );
    this.lnF = this.registerModule('ln_f', new LayerNorm(config.nEmbd, { backend }));
    this.lmHead = this.registerModule(
      'lm_head',
      new Linear(config.nEmbd, config.vocabSize, { backend, bias: false }),
    );
    const untied = this.wte.weight;
    this.wte.weight = this.lmHead.weight;
    untied.free();
    for (const [name, p] of this.namedParameters()) {
      if (/ln_(1|2|f)\./.test(name)) continue;
      if (name.endsWith('.bias')) {
        backend.fill(p.kernel('init'), 0);
        continue;
      }
      const values = randn(p.shape, { backend, std: 0.02, generator });
      copy_(p, values);
      values.free();
    }
    this.nameTensors();
  }

  /** Mean cross entropy of the next token over ids [B, T] (i32) and targets [B, T]. */
  async forward(idx: Tensor, targets: Tensor): Promise<Tensor> {
    const [b, t] = idx.shape as [number, number];
    let ids = this.positions.get(idx.backend);
    if (ids === undefined) {
      ids = keep(arange(this.config.blockSize, undefined, 1, { backend: idx.backend }));
      this.positions.set(idx.backend, ids);
    }
    const pos = ids.view([t]);
    const tok = this.wte.call(idx);
    const where = this.wpe.call(pos);
    let x = add(tok, where);
    for (const u of [tok, where, pos]) u.free();
    for (const block of this.blocks) {
      const next = (await block.call(x)) as Tensor;
      x.free();
      x = next;
    }
    return tidy(() => {
      const logits = this.lmHead.call(this.lnF.call(x));
      x.free();
      return crossEntropy(
        reshape(logits, [b * t, this.config.vocabSize]),
        reshape(targets, [b * t]),
      );
    });
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
