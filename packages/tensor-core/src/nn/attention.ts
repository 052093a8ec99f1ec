import type { Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { ArgumentError, ShapeError } from '../errors.js';
import {
  maskedFill,
  matmul,
  mul,
  reshape,
  softmax,
  split,
  tensor,
  transpose,
} from '../ops/index.js';
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
    const [b, t, c] = x.shape as [number, number, number];
    const hs = c / this.nHead;
    const temps: Tensor[] = [];
    const track = <T extends Tensor>(v: T): T => {
      temps.push(v);
      return v;
    };
    try {
      const qkv = track(this.cAttn.call(x));
      const heads = split(qkv, c, 2).map((part) => {
        track(part);
        const r = track(reshape(part, [b, t, this.nHead, hs]));
        return track(transpose(r, 1, 2));
      });
      const [q, k, v] = heads as [Tensor, Tensor, Tensor];
      const scores = track(matmul(q, k, { transposeB: true }));
      const scaled = track(mul(scores, 1 / Math.sqrt(hs)));
      const masked = track(maskedFill(scaled, this.causalMask(t, x.dtype, x.backend), -Infinity));
      const att = track(softmax(masked, -1));
      const dropped = track(this.attnDropout.call(att));
      const y = track(matmul(dropped, v));
      const merged = track(transpose(y, 1, 2));
      const flat = track(reshape(merged, [b, t, c]));
      const projected = track(this.cProj.call(flat));
      return this.residDropout.call(projected);
    } finally {
      for (const temp of temps) temp.free();
    }
  }
}
