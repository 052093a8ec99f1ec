import { DEFAULT_BLOCK_SIZE, OUTER_COMPRESSIONS, type OuterCompression } from './compression.js';
import {
  DEFAULT_TOPK_CHUNK,
  DEFAULT_TOPK_DENSITY,
  DEFAULT_TOPK_ERROR_DECAY,
  MAX_TOPK_CHUNK,
} from './topk-codec.js';
import { DEFAULT_TOPK_LEVELS, TOPK_LEVELS, type TopkLevels } from './topk-layout.js';

/** How the outer average compresses, as `DiLoCo` and `CompressedAverager` take it. */
export interface CodecOptions {
  /** `f32`, `bf16`, `int8`, `int4` or `topk`. Default `f32`. */
  compression?: OuterCompression;
  /**
   * Elements per encoded block: per scale for `int8` and `int4` (default 256), per chunk for
   * `topk` (default 4096, at most 65536). A positive multiple of 4.
   */
  blockSize?: number;
  /** `topk` only: the share of each chunk sent, in (0, 1]. Default 3/128 (96 of 4096). */
  density?: number;
  /** Feed what compression dropped into the next sync. Default true. */
  errorFeedback?: boolean;
  /**
   * What the error-feedback buffer keeps of itself at each sync, in [0, 1]: e = decay x e + delta.
   * Default 0.8 for `topk` (measured: DEFAULT_TOPK_ERROR_DECAY), 1 for the others (plain error
   * feedback).
   */
  errorDecay?: number;
  /**
   * `topk` only: the shapes of the tensors the flat vector holds, in order (their sizes summing to
   * its length), so that each tensor is tiled on its own ([Note: top-k tiles]); `DiLoCo` passes
   * its parameters' shapes. Default: none, runs of `blockSize` across the vector.
   */
  shapes?: readonly (readonly number[])[];
  /** `topk` only: 2-bit levels per tile or per tensor ([Note: sparse outer gradients]). */
  levels?: TopkLevels;
}

/** The codec options with their defaults, checked. */
export interface ResolvedCodecOptions {
  readonly compression: OuterCompression;
  readonly blockSize: number;
  /** The share of a chunk `topk` sends (the default where another compression is chosen). */
  readonly density: number;
  readonly errorFeedback: boolean;
  readonly errorDecay: number;
  /** `topk`'s tensor shapes, or null (runs across the vector). */
  readonly shapes: readonly (readonly number[])[] | null;
  readonly levels: TopkLevels;
}

/**
 * Fill in the defaults of `options` for its compression and check them; `fail(option, detail)`
 * throws the caller's typed error.
 */
export function resolveCodecOptions(
  options: CodecOptions,
  fail: (option: string, detail: string) => never,
): ResolvedCodecOptions {
  const compression = options.compression ?? 'f32';
  if (!OUTER_COMPRESSIONS.includes(compression)) {
    fail(
      'compression',
      `unknown outer compression '${String(compression)}' (${OUTER_COMPRESSIONS.join(', ')})`,
    );
  }
  const topk = compression === 'topk';
  const blockSize = options.blockSize ?? (topk ? DEFAULT_TOPK_CHUNK : DEFAULT_BLOCK_SIZE);
  if (!Number.isSafeInteger(blockSize) || blockSize <= 0 || blockSize % 4 !== 0) {
    fail('blockSize', `blockSize must be a positive multiple of 4, got ${blockSize}`);
  }
  if (topk && blockSize > MAX_TOPK_CHUNK) {
    fail(
      'blockSize',
      `a topk chunk (blockSize) holds at most ${MAX_TOPK_CHUNK} elements (16-bit indices), got ${blockSize}`,
    );
  }
  if (options.density !== undefined && !topk) {
    fail('density', `density applies to the topk compression, not ${compression}`);
  }
  const density = options.density ?? DEFAULT_TOPK_DENSITY;
  if (!(Number.isFinite(density) && density > 0 && density <= 1)) {
    fail('density', `density must be in (0, 1], got ${density}`);
  }
  const errorDecay = options.errorDecay ?? (topk ? DEFAULT_TOPK_ERROR_DECAY : 1);
  if (!(Number.isFinite(errorDecay) && errorDecay >= 0 && errorDecay <= 1)) {
    fail('errorDecay', `errorDecay must be in [0, 1], got ${errorDecay}`);
  }
  if (options.shapes !== undefined && !topk) {
    fail('shapes', `shapes apply to the topk compression, not ${compression}`);
  }
  const shapes = options.shapes ?? null;
  if (shapes !== null) {
    for (const [i, shape] of shapes.entries()) {
      if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
        fail('shapes', `shape ${i} is not a list of whole numbers >= 0: ${JSON.stringify(shape)}`);
      }
    }
  }
  if (options.levels !== undefined && !topk) {
    fail('levels', `levels apply to the topk compression, not ${compression}`);
  }
  const levels = options.levels ?? DEFAULT_TOPK_LEVELS;
  if (!TOPK_LEVELS.includes(levels)) {
    fail('levels', `levels must be one of ${TOPK_LEVELS.join(', ')}, got '${String(levels)}'`);
  }
  return {
    compression,
    blockSize,
    density,
    errorFeedback: options.errorFeedback ?? true,
    errorDecay,
    shapes,
    levels,
  };
}
