import type { Backend } from '../backend/backend.js';
import { ShapeError } from '../errors.js';
import { add, arange, copy_, crossEntropy, randn, reshape } from '../ops/index.js';
import type { RandomGenerator } from '../random/generator.js';
import { keep, tidy } from '../scope.js';
import type { Tensor } from '../tensor.js';
import { CausalSelfAttention } from './attention.js';
import { ModuleDict, ModuleList } from './containers.js';
import { Dropout, Embedding, GELU, LayerNorm, Linear } from './layers.js';
import { Module } from './module.js';

/** nanoGPT's `GPTConfig`, in camelCase. */
export interface GPTConfig {
  vocabSize: number;
  blockSize: number;
  nLayer: number;
  nHead: number;
  nEmbd: number;
  /** Dropout everywhere nanoGPT has it. 0 for the PyTorch comparisons. */
  dropout: number;
  /** Biases in the Linears and LayerNorms. */
  bias: boolean;
  /**
   * The MLP's GELU: exact (`'none'`, nanoGPT's `nn.GELU()`, the default) or the tanh form
   * (transformers' `gelu_new`, which GPT-2's weights were trained with).
   */
  geluApproximate?: 'none' | 'tanh';
}

/** Where the model lives and which random stream initializes it. */
export interface GPTOptions {
  backend: Backend;
  generator?: RandomGenerator;
}

/** nanoGPT's `MLP`: c_fc (C -> 4C), exact GELU, c_proj (4C -> C), dropout. */
class FeedForward extends Module<[Tensor], Tensor> {
  readonly cFc: Linear;
  gelu: GELU;
  readonly cProj: Linear;
  readonly dropout: Dropout;

  constructor(config: GPTConfig, options: GPTOptions) {
    super();
    const layer = { ...options, bias: config.bias };
    this.cFc = this.registerModule('c_fc', new Linear(config.nEmbd, 4 * config.nEmbd, layer));
    this.gelu = this.registerModule('gelu', new GELU(config.geluApproximate ?? 'none'));
    this.cProj = this.registerModule('c_proj', new Linear(4 * config.nEmbd, config.nEmbd, layer));
    this.dropout = this.registerModule('dropout', new Dropout(config.dropout, options));
  }

  forward(x: Tensor): Tensor {
    return tidy(() => this.dropout.call(this.cProj.call(this.gelu.call(this.cFc.call(x)))));
  }
}

/** nanoGPT's `Block`: x + attn(ln_1(x)), then x + mlp(ln_2(x)); FSDP's unit in a GPT. */
export class GPTBlock extends Module<[Tensor], Tensor> {
  readonly ln1: LayerNorm;
  readonly attn: CausalSelfAttention;
  readonly ln2: LayerNorm;
  readonly mlp: FeedForward;

  constructor(config: GPTConfig, options: GPTOptions) {
    super();
    const norm = { ...options, bias: config.bias };
    this.ln1 = this.registerModule('ln_1', new LayerNorm(config.nEmbd, norm));
    this.attn = this.registerModule(
      'attn',
      new CausalSelfAttention({
        ...options,
        nEmbd: config.nEmbd,
        nHead: config.nHead,
        bias: config.bias,
        dropout: config.dropout,
      }),
    );
    this.ln2 = this.registerModule('ln_2', new LayerNorm(config.nEmbd, norm));
    this.mlp = this.registerModule('mlp', new FeedForward(config, options));
  }

  forward(x: Tensor): Tensor {
    return tidy(() => {
      const h = add(x, this.attn.call(this.ln1.call(x)));
      return add(h, this.mlp.call(this.ln2.call(h)));
    });
  }
}

/**
 * What `GPT.forward` returns: logits [B, T, vocab] and, given targets, the mean loss. A type
 * alias, not an interface, so that `tidy` accepts it as a result.
 */
export type GPTOutput = {
  logits: Tensor;
  loss: Tensor | null;
};

/**
 * nanoGPT's GPT (Karpathy), with PyTorch's parameter names, so its checkpoints load as they are:
 * `transformer.wte.weight`, `transformer.wpe.weight`, `transformer.h.{i}.ln_1.weight`,
 * `transformer.h.{i}.attn.c_attn.weight`, ..., `transformer.ln_f.weight`, and `lm_head.weight`,
 * which is the same tensor as `transformer.wte.weight` (weight tying).
 *
 * Initialized as nanoGPT: every Linear and Embedding weight N(0, 0.02), biases zero, LayerNorms
 * ones and zeros, and each residual projection (`c_proj.weight`) N(0, 0.02 / sqrt(2 nLayer)).
 */
export class GPT extends Module<[Tensor, (Tensor | null)?], GPTOutput> {
  readonly config: GPTConfig;
  readonly wte: Embedding;
  readonly wpe: Embedding;
  readonly drop: Dropout;
  readonly blocks: ModuleList<GPTBlock>;
  readonly lnF: LayerNorm;
  readonly lmHead: Linear;
  private readonly positions = new Map<number, Tensor>();

  constructor(config: GPTConfig, options: GPTOptions) {
    super();
    this.config = { ...config };
    // Every weight and bias these draw, `initWeights` draws again: they take their counters and
    // fill zeros ([Note: an init that is overwritten]).
    const layers = { ...options, skipInit: true };
    this.wte = new Embedding(config.vocabSize, config.nEmbd, layers);
    this.wpe = new Embedding(config.blockSize, config.nEmbd, layers);
    this.drop = new Dropout(config.dropout, options);
    this.blocks = new ModuleList(
      Array.from({ length: config.nLayer }, () => new GPTBlock(config, layers)),
    );
    this.lnF = new LayerNorm(config.nEmbd, { ...options, bias: config.bias });
    this.registerModule(
      'transformer',
      new ModuleDict<Module>({
        wte: this.wte,
        wpe: this.wpe,
        drop: this.drop,
        h: this.blocks,
        ln_f: this.lnF,
      }),
    );
    this.lmHead = this.registerModule(
      'lm_head',
      new Linear(config.nEmbd, config.vocabSize, { ...layers, bias: false }),
    );
    // Weight tying, as nanoGPT: `self.transformer.wte.weight = self.lm_head.weight`.
    const untied = this.wte.weight;
    this.wte.weight = this.lmHead.weight;
    untied.free();
    this.initWeights(options);
    this.nameTensors();
  }

  private initWeights(options: GPTOptions): void {
    const residualStd = 0.02 / Math.sqrt(2 * this.config.nLayer);
    for (const [name, p] of this.namedParameters()) {
      const isNorm = /\.ln_(1|2|f)\./.test(name);
      if (isNorm) continue;
      if (name.endsWith('.bias')) {
        p.backend.fill(p.kernel('GPT.init'), 0);
        continue;
      }
      const std = name.endsWith('c_proj.weight') ? residualStd : 0.02;
      const values = randn(p.shape, {
        backend: options.backend,
        std,
        generator: options.generator,
      });
      copy_(p, values);
      values.free();
    }
  }

  /**
   * Switch the MLPs' GELU (see `GPTConfig.geluApproximate`): `--init` of transformers' GPT-2
   * weights computes as they were trained, with `gelu_new`.
   */
  setGeluApproximate(approximate: 'none' | 'tanh'): void {
    this.config.geluApproximate = approximate;
    for (const block of this.blocks) {
      block.mlp.gelu = block.mlp.registerModule('gelu', new GELU(approximate));
    }
  }

  /** Number of parameters (each tied tensor once), optionally without the position embeddings. */
  numParameters(options: { nonEmbedding?: boolean } = {}): number {
    let n = 0;
    for (const p of this.parameters()) n += p.size;
    return options.nonEmbedding ? n - this.wpe.weight.size : n;
  }

  /** The cached position ids 0..t-1 (i32) on the model's backend. */
  private positionIds(t: number, backend: Backend): Tensor {
    let pos = this.positions.get(t);
    if (pos === undefined || pos.backend !== backend) {
      pos = arange(t, undefined, 1, { backend });
      this.positions.set(t, pos);
      return keep(pos);
    }
    return pos;
  }

  /** The ids' [B, T], after checking them against the block size. */
  private checkIds(idx: Tensor): [number, number] {
    if (idx.rank !== 2 || idx.shape[1]! > this.config.blockSize) {
      throw new ShapeError(
        'GPT',
        [idx.shape],
        `expected ids [B, T] with T <= ${this.config.blockSize}`,
      );
    }
    return idx.shape as [number, number];
  }

  /** Token plus position embeddings, then dropout: the input of the first block. */
  private embed(idx: Tensor, pos: Tensor): Tensor {
    return this.drop.call(add(this.wte.call(idx), this.wpe.call(pos)));
  }

  /** ln_f, lm_head and, given targets, the mean cross entropy. */
  private head(x: Tensor, targets: Tensor | null): GPTOutput {
    const logits = this.lmHead.call(this.lnF.call(x));
    if (targets === null) return { logits, loss: null };
    return { logits, loss: gptLoss(logits, targets) };
  }

  /**
   * idx: token ids i32 [B, T] with T <= blockSize; targets: i32 [B, T] or null. The loss is the
   * mean cross entropy over all positions, targets of -1 ignored (nanoGPT's `ignore_index=-1`).
   */
  forward(idx: Tensor, targets: Tensor | null = null): GPTOutput {
    const [, t] = this.checkIds(idx);
    const pos = this.positionIds(t, idx.backend);
    return tidy(() => {
      let x = this.embed(idx, pos);
      for (const block of this.blocks) x = block.call(x);
      return this.head(x, targets);
    });
  }

  /**
   * [Note: the GPT's async forward]
   * `forward`, with each block awaited: a block wrapped by FSDP returns a promise (it all-gathers
   * its parameters first), and `tidy` is synchronous, so it cannot span the awaits. The embedding
   * and the head run in their own `tidy` scopes; between blocks each block's input is freed as
   * soon as the block has returned its output (autograd keeps what it saved). The ops and their
   * order are those of `forward`, so the numbers are bit-identical (`gpt.test.ts` beside this file
   * for the loss; the trainer's `src/models/gpt-async.test.ts` for 4 AdamW steps of its PyTorch
   * fixture, losses and gradients).
   */
  async forwardAsync(idx: Tensor, targets: Tensor | null = null): Promise<GPTOutput> {
    const [, t] = this.checkIds(idx);
    const pos = this.positionIds(t, idx.backend);
    let x = tidy(() => this.embed(idx, pos));
    try {
      for (const block of this.blocks) {
        const next = await (block.call(x) as Tensor | Promise<Tensor>);
        if (next !== x) x.free();
        x = next;
      }
      const last = x;
      return tidy(() => this.head(last, targets));
    } finally {
      x.free();
    }
  }
}

/** The mean cross entropy of logits [B, T, vocab] against targets [B, T], -1 ignored (nanoGPT's). */
export function gptLoss(logits: Tensor, targets: Tensor): Tensor {
  const [b, t, vocab] = logits.shape as [number, number, number];
  return tidy(() =>
    crossEntropy(reshape(logits, [b * t, vocab]), reshape(targets, [b * t]), { ignoreIndex: -1 }),
  );
}
