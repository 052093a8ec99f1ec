import type { Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { ArgumentError, ShapeError } from '../errors.js';
import { tensor } from '../ops/index.js';
import { scaledMaskedSoftmax } from '../ops/masked-softmax.js';
import { matmulViews } from '../ops/matmul-views.js';
import { attentionInOneKernel, headViews } from '../ops/attention-heads.js';
import { transposeView } from '../ops/matrix-views.js';
import { keep } from '../scope.js';
import type { Tensor } from '../tensor.js';
import type { LayerOptions } from './init.js';
import { Dropout, Linear } from './layers.js';
import { Module } from './module.js';

/** Options of `CausalSelfAttention` (nanoGPT's config names). */
export interface CausalSelfAttentionOptions extends LayerOptions {
  nEmbd: number;
  nHead: number;
  /** Biases in c_attn and c_proj. Default true. */
  bias?: boolean;
  /** Dropout on the attention weights and on the output. Default 0. */
  dropout?: number;
}

/**
 * Multi-head causal self-attention as nanoGPT's `CausalSelfAttention`: `c_attn` (Linear C -> 3C)
 * makes q, k, v; softmax(q k^T / sqrt(hs)) with future positions masked; `c_proj` (Linear C -> C).
 * Parameter names match nanoGPT (`c_attn.weight`, `c_attn.bias`, `c_proj.weight`, `c_proj.bias`).
 */
export class CausalSelfAttention extends Module<[Tensor], Tensor> {
  readonly nEmbd: number;
  readonly nHead: number;
  readonly cAttn: Linear;
  readonly cProj: Linear;
  readonly attnDropout: Dropout;
  readonly residDropout: Dropout;
  private readonly masks = new Map<string, Tensor>();

  constructor(options: CausalSelfAttentionOptions) {
    super();
    const { nEmbd, nHead } = options;
    if (!(nHead > 0) || nEmbd % nHead !== 0) {
      throw new ArgumentError(
        'CausalSelfAttention',
        `nEmbd ${nEmbd} must be a multiple of nHead ${nHead}`,
      );
    }
    this.nEmbd = nEmbd;
    this.nHead = nHead;
    const bias = options.bias ?? true;
    this.cAttn = this.registerModule('c_attn', new Linear(nEmbd, 3 * nEmbd, { ...options, bias }));
    this.cProj = this.registerModule('c_proj', new Linear(nEmbd, nEmbd, { ...options, bias }));
    const p = options.dropout ?? 0;
    this.attnDropout = this.registerModule('attn_dropout', new Dropout(p, options));
    this.residDropout = this.registerModule('resid_dropout', new Dropout(p, options));
  }

  /** 1 above the diagonal (key after query), cached per length, dtype and backend. */
  private causalMask(t: number, dtype: DType, backend: Backend): Tensor {
    const key = `${t}:${dtype}:${backend.description}`;
    let mask = this.masks.get(key);
    if (mask === undefined || mask.backend !== backend) {
      const values = new Array<number>(t * t);
      for (let q = 0; q < t; q++) for (let k = 0; k < t; k++) values[q * t + k] = k > q ? 1 : 0;
      mask = keep(tensor(values, { backend, dtype, shape: [t, t] }));
      this.masks.set(key, mask);
    }
    return mask;
  }

  forward(x: Tensor): Tensor {
    if (x.rank !== 3 || x.shape[2] !== this.nEmbd) {
      throw new ShapeError(
        'CausalSelfAttention',
        [x.shape],
        `expected input [B, T, ${this.nEmbd}]`,
      );
    }
    const temps: Tensor[] = [];
    const track = <T extends Tensor>(v: T): T => {
      temps.push(v);
      return v;
    };
    try {
      const qkv = track(this.cAttn.call(x));
      const mask = this.causalMask(x.shape[1]!, x.dtype, x.backend);
      // The weights' dropout only where it drops something: a step without it takes the one
      // kernel where the backend has it ([Note: attention's heads in one call]).
      const dropout = this.attnDropout.p > 0 && this.attnDropout.training;
      const flat = track(
        attendHeads(qkv, this.nHead, mask, dropout ? (att) => this.attnDropout.call(att) : null),
      );
      const projected = track(this.cProj.call(flat));
      return this.residDropout.call(projected);
    } finally {
      for (const temp of temps) temp.free();
    }
  }
}

/**
 * Causal attention over the heads of `qkv` [B, T, 3C] (q, k and v side by side, nh heads each):
 * softmax(q k^T / sqrt(hs)) with `mask`'s 1s at -inf, `dropout` on the weights, times v, merged
 * to [B, T, C]. Without dropout, one backend kernel each way where the backend has it ([Note:
 * attention's heads in one call]); else heads are windows of qkv read through strides and y is
 * written straight into [B, T, C]'s layout: no head is copied ([Note: matmul over strided views]).
 * Both give the same bits.
 */
export function attendHeads(
  qkv: Tensor,
  nHead: number,
  mask: Tensor,
  dropout: ((att: Tensor) => Tensor) | null = null,
): Tensor {
  const [b, t, c3] = qkv.shape as [number, number, number];
  const c = c3 / 3;
  const scale = 1 / Math.sqrt(c / nHead);
  if (dropout === null) {
    const y = attentionInOneKernel(qkv, nHead, mask, scale);
    if (y !== null) return y;
  }
  const { head, square, merged } = headViews(b, t, c, nHead);
  const temps: Tensor[] = [];
  const track = <T extends Tensor>(v: T): T => {
    temps.push(v);
    return v;
  };
  try {
    const scores = track(
      matmulViews(qkv, head(0), qkv, transposeView(head(1)), square.shape, square),
    );
    // softmax(maskedFill(scores / sqrt(hs), mask, -inf)) in one kernel each way where the
    // backend has it ([Note: attention's softmax in one call]).
    const att = track(scaledMaskedSoftmax(scores, mask, scale));
    const dropped = dropout === null ? att : dropout(att);
    if (dropped !== att) track(dropped);
    return matmulViews(dropped, square, qkv, head(2), [b, t, c], merged);
  } finally {
    for (const temp of temps) temp.free();
  }
}
