import {
  cast,
  crossEntropy,
  embedding,
  gelu,
  ge,
  layerNorm,
  linear,
  mseLoss,
  mul,
  rand,
  relu,
  reshape,
} from '../ops/index.js';
import { ArgumentError } from '../errors.js';
import type { CrossEntropyOptions } from '../ops/index.js';
import type { RandomGenerator } from '../random/generator.js';
import type { Tensor } from '../tensor.js';
import {
  constantInit,
  kaimingUniformBound,
  type LayerOptions,
  normalInit,
  uniformInit,
} from './init.js';
import { Module } from './module.js';

/**
 * y = x W^T + b with W [out, in], like `torch.nn.Linear`. Initialized as PyTorch:
 * W ~ kaiming_uniform(a = sqrt 5), i.e. U(-1/sqrt(in), 1/sqrt(in)); b ~ U(-1/sqrt(in), 1/sqrt(in)).
 */
export class Linear extends Module<[Tensor], Tensor> {
  constructor(
    readonly inFeatures: number,
    readonly outFeatures: number,
    options: LayerOptions & { bias?: boolean } = {},
  ) {
    super();
    const bound = kaimingUniformBound(inFeatures);
    this.registerParameter('weight', uniformInit([outFeatures, inFeatures], bound, options));
    this.registerParameter(
      'bias',
      options.bias === false
        ? null
        : uniformInit([outFeatures], inFeatures > 0 ? 1 / Math.sqrt(inFeatures) : 0, options),
    );
  }

  get weight(): Tensor {
    return this.getParameter('weight');
  }
  /** Replace (or tie) the weight, like `linear.weight = other` in PyTorch. */
  set weight(t: Tensor) {
    this.registerParameter('weight', t, { requiresGrad: t.requiresGrad });
  }
  get bias(): Tensor | null {
    return this.optionalParameter('bias');
  }

  forward(x: Tensor): Tensor {
    return linear(x, this.weight, this.bias);
  }
}

/** A lookup table [num, dim] indexed by i32 ids, like `torch.nn.Embedding`. Initialized N(0, 1). */
export class Embedding extends Module<[Tensor], Tensor> {
  constructor(
    readonly numEmbeddings: number,
    readonly embeddingDim: number,
    options: LayerOptions = {},
  ) {
    super();
    this.registerParameter('weight', normalInit([numEmbeddings, embeddingDim], 0, 1, options));
  }

  get weight(): Tensor {
    return this.getParameter('weight');
  }
  set weight(t: Tensor) {
    this.registerParameter('weight', t, { requiresGrad: t.requiresGrad });
  }

  forward(ids: Tensor): Tensor {
    return embedding(this.weight, ids);
  }
}

/** Layer normalization over the last dim, like `torch.nn.LayerNorm`: weight ones, bias zeros. */
export class LayerNorm extends Module<[Tensor], Tensor> {
  readonly eps: number;
  constructor(
    readonly normalizedShape: number,
    options: LayerOptions & { eps?: number; elementwiseAffine?: boolean; bias?: boolean } = {},
  ) {
    super();
    this.eps = options.eps ?? 1e-5;
    const affine = options.elementwiseAffine ?? true;
    this.registerParameter('weight', affine ? constantInit([normalizedShape], 1, options) : null);
    this.registerParameter(
      'bias',
      affine && options.bias !== false ? constantInit([normalizedShape], 0, options) : null,
    );
  }

  get weight(): Tensor | null {
    return this.optionalParameter('weight');
  }
  get bias(): Tensor | null {
    return this.optionalParameter('bias');
  }

  forward(x: Tensor): Tensor {
    return layerNorm(x, { weight: this.weight, bias: this.bias, eps: this.eps });
  }
}

/** GELU, exact (`'none'`, PyTorch's default) or with the tanh approximation. */
export class GELU extends Module<[Tensor], Tensor> {
  constructor(readonly approximate: 'none' | 'tanh' = 'none') {
    super();
  }
  forward(x: Tensor): Tensor {
    return gelu(x, { approximate: this.approximate });
  }
}

export class ReLU extends Module<[Tensor], Tensor> {
  forward(x: Tensor): Tensor {
    return relu(x);
  }
}

/**
 * Dropout, like `torch.nn.Dropout`: in training, zero each element with probability p and scale
 * the rest by 1 / (1 - p); the identity in eval mode. The mask is drawn from `generator` (default:
 * the default generator), so `checkpoint` replays the same mask when it restores the offset.
 * Returns a new tensor in both modes: where it is the identity (eval mode, or p = 0) a view of x
 * (a reshape to x's shape: its storage shared, its gradient passed through), as PyTorch returns
 * its input there, rather than a copy made by multiplying by 1 (at GPT-2's attention weights,
 * 12 MB a layer copied in forward and again in backward).
 */
export class Dropout extends Module<[Tensor], Tensor> {
  readonly generator: RandomGenerator | undefined;
  constructor(
    readonly p = 0.5,
    options: { generator?: RandomGenerator } = {},
  ) {
    super();
    if (!(p >= 0 && p <= 1)) {
      throw new ArgumentError('Dropout', `probability ${p} is not in [0, 1]`);
    }
    this.generator = options.generator;
  }

  forward(x: Tensor): Tensor {
    if (!this.training || this.p === 0) return reshape(x, x.shape);
    if (this.p === 1) return mul(x, 0);
    const u = rand(x.shape, {
      backend: x.backend,
      dtype: x.dtype === 'f64' ? 'f64' : 'f32',
      generator: this.generator,
    });
    const keepMask = ge(u, this.p);
    const mask = keepMask.dtype === x.dtype ? keepMask : cast(keepMask, x.dtype);
    const scaled = mul(mask, 1 / (1 - this.p));
    try {
      return mul(x, scaled);
    } finally {
      for (const t of new Set([u, keepMask, mask, scaled])) t.free();
    }
  }
}

/** Mean cross entropy of logits [N, C] against i32 targets [N] (`torch.nn.CrossEntropyLoss`). */
export class CrossEntropyLoss extends Module<[Tensor, Tensor], Tensor> {
  constructor(readonly options: CrossEntropyOptions = {}) {
    super();
  }
  forward(logits: Tensor, targets: Tensor): Tensor {
    return crossEntropy(logits, targets, this.options);
  }
}

/** Mean squared error (`torch.nn.MSELoss`). */
export class MSELoss extends Module<[Tensor, Tensor], Tensor> {
  constructor(readonly reduction: 'mean' | 'sum' | 'none' = 'mean') {
    super();
  }
  forward(input: Tensor, target: Tensor): Tensor {
    return mseLoss(input, target, { reduction: this.reduction });
  }
}
