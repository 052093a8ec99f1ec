import type { ProcessGroup } from '@webshard/collectives';
import type { BlockCodec } from './block-codec.js';
import { type CodecOptions, resolveCodecOptions } from './codec-options.js';
import { blockCodec, encodeWithFeedback, type OuterCompression } from './compression.js';
import { DilocoArgumentError, DilocoStateError } from './errors.js';
import { averageSparse } from './sparse-average.js';
import { TopkCodec } from './topk-codec.js';
import type { TopkLevels } from './topk-layout.js';

/**
 * Options of `CompressedAverager`: the codec's ([Note: error feedback], [Note: sparse outer
 * gradients]) and a deadline.
 */
export interface CompressedAverageOptions extends CodecOptions {
  /** Deadline of each collective in ms (default: the group's). */
  timeoutMs?: number;
}

/** What one average moved, counted from this rank's sends ([Note: compressed averaging]). */
export interface AverageStats {
  /** Payload bytes this rank sent (the ring's volume for f32; shards and scales for the others). */
  readonly bytesSent: number;
}

/**
 * [Note: compressed averaging]
 * `f32` is the group's `allReduce` with `avg` (a ring: 2 (n - 1) / n x 4 bytes an element sent by
 * each rank). `bf16` and `int8` cannot go through a reducing collective, which would add encoded
 * words, so they average in two phases, as a ring all-reduce does, with encoded data on the wire:
 * 1. reduce-scatter: the blocks are split into `size` equal shards (padded with zero blocks);
 *    each rank encodes all its blocks (with error feedback) and sends shard s to rank s (`send` and
 *    `recv` of the group, at ring offsets 1 .. n - 1); rank s decodes the n contributions to its
 *    shard and adds them in rank order (the same sum whichever rank computes it), times 1 / n.
 * 2. all-gather: rank s encodes its averaged shard (with its own residual: the second rounding is
 *    fed back too) and the group's `allGather` hands every shard to every rank, which decodes all
 *    of them, its own included, so every rank ends with the same bits.
 * Each rank sends 2 (n - 1) / n of the encoded size: 4x less than f32 for int8 (plus 4 bytes a
 * block), 8x for int4, 2x for bf16. `topk` is all-gathered instead ([Note: averaging sparse
 * contributions]). Only collectives of the group are used, so it runs over every transport
 * (local, shm, tcp, ws) and under the link shaper.
 */
export class CompressedAverager {
  readonly compression: OuterCompression;
  readonly blockSize: number;
  readonly density: number;
  readonly errorFeedback: boolean;
  readonly errorDecay: number;
  private readonly codec: BlockCodec | null;
  readonly shapes: readonly (readonly number[])[] | null;
  readonly levels: TopkLevels;
  /** `topk`'s codec, made for the length of the first average. */
  private topk: TopkCodec | null = null;
  private readonly timeoutMs: number | undefined;
  /** Per element of the input: what compression dropped in phase 1 (null for f32 or no feedback). */
  private residual: Float32Array | null = null;
  /** Per element of this rank's shard: what phase 2 dropped. */
  private shardResidual: Float32Array | null = null;
  private count = -1;

  constructor(
    readonly group: ProcessGroup,
    options: CompressedAverageOptions = {},
  ) {
    const fail = (option: string, detail: string): never => {
      throw new DilocoArgumentError({ op: 'CompressedAverager', rank: group.rank }, option, detail);
    };
    const codec = resolveCodecOptions(options, fail);
    this.compression = codec.compression;
    this.blockSize = codec.blockSize;
    this.density = codec.density;
    this.errorFeedback = codec.errorFeedback;
    this.errorDecay = codec.errorDecay;
    this.timeoutMs = options.timeoutMs;
    const { compression, blockSize } = codec;
    this.shapes = codec.shapes;
    this.levels = codec.levels;
    this.codec =
      compression === 'f32' || compression === 'topk' ? null : blockCodec(compression, blockSize);
  }

  /** What compression still owes: the phase-1 residual (a copy), or null when there is none. */
  residuals(): { readonly input: Float32Array | null; readonly shard: Float32Array | null } {
    return { input: this.residual?.slice() ?? null, shard: this.shardResidual?.slice() ?? null };
  }

  /**
   * The same averager over `group` (a new membership), keeping what this rank's inputs are owed;
   * the shard residual goes, since the shards are split anew.
   */
  regroup(group: ProcessGroup): CompressedAverager {
    const next = new CompressedAverager(group, {
      compression: this.compression,
      blockSize: this.blockSize,
      ...(this.compression === 'topk' ? { density: this.density, levels: this.levels } : {}),
      ...(this.shapes === null ? {} : { shapes: this.shapes }),
      errorFeedback: this.errorFeedback,
      errorDecay: this.errorDecay,
      ...(this.timeoutMs === undefined ? {} : { timeoutMs: this.timeoutMs }),
    });
    next.loadResiduals({ input: this.residual, shard: null });
    return next;
  }

  /** Restore residuals saved by `residuals()` (lengths checked at the next `average`). */
  loadResiduals(saved: { input: Float32Array | null; shard: Float32Array | null }): void {
    this.residual = saved.input?.slice() ?? null;
    this.shardResidual = saved.shard?.slice() ?? null;
    this.count = saved.input?.length ?? -1;
  }

  /**
   * Replace `values` with their average over the group (every rank calls it with the same
   * length), compressed as configured. Resolves when every rank's contribution is in.
   */
  async average(values: Float32Array): Promise<AverageStats> {
    // A round that fails (a rank lost) leaves the residuals as they were: what it encoded was
    // never delivered, so it is still owed ([Note: DiLoCo in an elastic world]).
    const before = {
      residual: this.residual?.slice() ?? null,
      shard: this.shardResidual?.slice() ?? null,
      count: this.count,
    };
    try {
      return await this.averageOnce(values);
    } catch (error) {
      this.residual = before.residual;
      this.shardResidual = before.shard;
      this.count = before.count;
      throw error;
    }
  }

  private topkCodec(count: number): TopkCodec {
    const shapes = this.shapes;
    if (shapes !== null) {
      const total = shapes.reduce((sum, shape) => sum + shape.reduce((a, b) => a * b, 1), 0);
      if (total !== count) {
        throw new DilocoArgumentError(
          { op: 'average', rank: this.group.rank },
          'shapes',
          `the shapes hold ${total} elements, the values ${count}`,
        );
      }
    }
    return new TopkCodec(count, shapes, this.blockSize, this.density, this.levels);
  }

  private async averageOnce(values: Float32Array): Promise<AverageStats> {
    const { group } = this;
    const n = group.size;
    if (this.count !== -1 && this.count !== values.length) {
      throw new DilocoStateError(
        { op: 'average', rank: group.rank },
        'residual',
        `averaging ${values.length} elements, but the residual kept from earlier rounds has ${this.count}`,
      );
    }
    this.count = values.length;
    if (this.compression === 'topk') {
      if (this.topk?.count !== values.length) this.topk = this.topkCodec(values.length);
      // Compressed at any group size: the decayed buffer is SparseLoCo's outer momentum.
      if (this.errorFeedback && this.residual === null) {
        this.residual = new Float32Array(values.length);
      }
      const bytesSent = await averageSparse(
        group,
        this.topk,
        values,
        this.errorFeedback ? this.residual : null,
        this.errorDecay,
        this.timeoutMs,
      );
      return { bytesSent };
    }
    if (this.codec === null || n === 1) {
      if (n > 1) await group.allReduce(values, { op: 'avg', timeoutMs: this.timeoutMs }).wait();
      return { bytesSent: n === 1 ? 0 : Math.round(((2 * (n - 1)) / n) * values.length * 4) };
    }
    const codec = this.codec;
    const words = codec.wordsPerBlock;
    const blocksPerRank = Math.ceil(Math.ceil(values.length / codec.blockSize) / n);
    const shardWords = blocksPerRank * words;
    const shardElements = blocksPerRank * codec.blockSize;
    if (this.errorFeedback && this.residual === null)
      this.residual = new Float32Array(values.length);
    if (this.errorFeedback && this.shardResidual?.length !== shardElements) {
      // A new group size splits the shards anew: what the old shard owed is dropped with it.
      this.shardResidual = new Float32Array(shardElements);
    }
    // Phase 1: encode everything, exchange shards, sum this rank's shard in rank order.
    const encoded = new Int32Array(shardWords * n);
    encodeWithFeedback(codec, values, this.residual, blocksPerRank * n, encoded, this.errorDecay);
    const incoming = new Int32Array(shardWords * n);
    const rank = group.rank;
    const timeoutMs = this.timeoutMs;
    const pending = [];
    for (let k = 1; k < n; k++) {
      const to = (rank + k) % n;
      const from = (rank - k + n) % n;
      pending.push(
        group.send(encoded.subarray(to * shardWords, (to + 1) * shardWords), to, { timeoutMs }),
      );
      pending.push(
        group.recv(incoming.subarray(from * shardWords, (from + 1) * shardWords), from, {
          timeoutMs,
        }),
      );
    }
    await Promise.all(pending.map((work) => work.wait()));
    incoming.set(encoded.subarray(rank * shardWords, (rank + 1) * shardWords), rank * shardWords);
    const shard = new Float32Array(shardElements);
    for (let r = 0; r < n; r++) {
      for (let b = 0; b < blocksPerRank; b++) {
        codec.decodeBlock(
          incoming,
          r * shardWords + b * words,
          shard,
          b * codec.blockSize,
          r === 0,
        );
      }
    }
    const inverse = 1 / n;
    for (let i = 0; i < shard.length; i++) shard[i]! *= inverse;
    // Phase 2: encode the averaged shard and gather every shard on every rank.
    const mine = new Int32Array(shardWords);
    encodeWithFeedback(
      codec,
      shard,
      this.errorFeedback ? this.shardResidual : null,
      blocksPerRank,
      mine,
      this.errorDecay,
    );
    const gathered = new Int32Array(shardWords * n);
    await group.allGather(mine, gathered, { timeoutMs }).wait();
    for (let b = 0; b < blocksPerRank * n; b++) {
      const start = b * codec.blockSize;
      if (start >= values.length) break;
      codec.decodeBlock(gathered, b * words, values, start, true);
    }
    return { bytesSent: 2 * (n - 1) * shardWords * 4 };
  }
}
