import type { BlockCompression } from './block-codec.js';
import { blockCodec, DEFAULT_BLOCK_SIZE } from './compression.js';
import type { DilocoStateDict } from './diloco-types.js';
import { DilocoArgumentError } from './errors.js';

/** How a join sends the outer momentum: exact (`f32`) or through a block codec. */
export type JoinMomentum = 'f32' | BlockCompression;

/** Options of `encodeJoinState`. */
export interface JoinStateOptions {
  /** The outer momentum's format (default `int8`). The global copy is always f32, exact. */
  momentum?: JoinMomentum;
  /** Values per block of the momentum's codec (default 256). */
  blockSize?: number;
}

/** The named arrays a newcomer receives: move them bit for bit (a state transfer). */
export type JoinEntries = Map<string, Float32Array | Int32Array | Uint8Array>;

/** The step counts and formats a newcomer needs besides the arrays. */
interface JoinMeta {
  readonly innerStep: number;
  readonly outerStep: number;
  readonly parameters: number;
  readonly momentum: JoinMomentum | null;
  readonly blockSize: number;
}

/*
 * [Note: a compressed join]
 * What a newcomer to a DiLoCo world needs, and in what form ([Note: diloco members that come and
 * go] in the trainer sends it):
 * - the global copy, f32 bit for bit (4 bytes a parameter): it is the newcomer's parameters and
 *   the base every later outer step moves; a copy off by one bit would leave the newcomer's global
 *   copy apart from the world's forever, so nothing lossy is allowed here.
 * - the outer momentum, through a block codec (`int8` by default: 1 byte a parameter and one f32
 *   scale a block of 256, 1.016 bytes a parameter; `int4` 0.516, `bf16` 2, `f32` 4 exact). Every
 *   member's outer step uses it, so the members must hold the same bits: every member rounds its
 *   own momentum to the sent form (`roundJoinMomentum`, deterministic, the same bits on every
 *   member because their momenta were equal) at the join, and the world goes on from the rounded
 *   momentum. The error is one rounding of each value, at most half a block's step (max|b| / 254
 *   for int8, max|b| / 14 for int4); it decays by the outer momentum at every outer step.
 * - the step counts (inner and outer), as JSON.
 * - not AdamW's moments: the newcomer's inner optimizer starts fresh (step 0, zero moments, with
 *   its bias correction), as DiLoCo's own workers keep their inner state private and never average
 *   it (Douillard et al. 2023); a fresh AdamW's first steps after bias correction are sign-like
 *   steps of size lr, which the newcomer's first inner phase absorbs and the outer average dilutes
 *   by the world's size. That saves 8 bytes a parameter, two thirds of a full f32 state.
 * - not the error-feedback residuals: they are each member's own, a newcomer's starts at zero.
 * So a newcomer receives 5.02 bytes a parameter with int8 momentum (4.52 with int4) instead of the
 * 16 of global, momentum and AdamW's two moments in f32.
 */

function checkBlockSize(blockSize: number): void {
  if (!Number.isInteger(blockSize) || blockSize < 8 || blockSize % 8 !== 0) {
    throw new DilocoArgumentError(
      { op: 'encodeJoinState', rank: -1 },
      'blockSize',
      `the join's block size must be a whole multiple of 8, got ${blockSize}`,
    );
  }
}

function encodeMomentum(momentum: Float32Array, format: BlockCompression, blockSize: number) {
  const codec = blockCodec(format, blockSize);
  const blocks = Math.ceil(momentum.length / blockSize);
  const words = new Int32Array(blocks * codec.wordsPerBlock);
  for (let b = 0; b < blocks; b++) codec.encodeBlock(momentum, b, words, b * codec.wordsPerBlock);
  return words;
}

function decodeMomentum(
  words: Int32Array,
  format: BlockCompression,
  blockSize: number,
  length: number,
): Float32Array {
  const codec = blockCodec(format, blockSize);
  const out = new Float32Array(length);
  const blocks = Math.ceil(length / blockSize);
  for (let b = 0; b < blocks; b++) {
    codec.decodeBlock(words, b * codec.wordsPerBlock, out, b * blockSize, true);
  }
  return out;
}

/**
 * The entries a newcomer needs of `state` ([Note: a compressed join]): `join.meta` (JSON),
 * `join.global` (f32, exact) and `join.momentum` (encoded) when the state has a momentum.
 */
export function encodeJoinState(
  state: DilocoStateDict,
  options: JoinStateOptions = {},
): JoinEntries {
  const format = options.momentum ?? 'int8';
  const blockSize = options.blockSize ?? DEFAULT_BLOCK_SIZE;
  checkBlockSize(blockSize);
  const momentum = state.momentumBuffer;
  const meta: JoinMeta = {
    innerStep: state.innerStep,
    outerStep: state.outerStep,
    parameters: state.global.length,
    momentum: momentum === null ? null : format,
    blockSize,
  };
  const entries: JoinEntries = new Map();
  entries.set('join.meta', new TextEncoder().encode(JSON.stringify(meta)));
  entries.set('join.global', state.global);
  if (momentum !== null) {
    entries.set(
      'join.momentum',
      format === 'f32' ? momentum : encodeMomentum(momentum, format, blockSize),
    );
  }
  return entries;
}

/**
 * The state a newcomer loads (`DiLoCo.loadStateDict`) from `encodeJoinState`'s entries: the global
 * copy exact, the momentum as every member rounded it, no residuals.
 */
export function decodeJoinState(entries: ReadonlyMap<string, ArrayBufferView>): DilocoStateDict {
  const metaBytes = entries.get('join.meta');
  const global = entries.get('join.global');
  if (!(metaBytes instanceof Uint8Array) || !(global instanceof Float32Array)) {
    throw new DilocoArgumentError(
      { op: 'decodeJoinState', rank: -1 },
      'entries',
      'a join needs join.meta (bytes) and join.global (f32)',
    );
  }
  const meta = JSON.parse(new TextDecoder().decode(metaBytes)) as JoinMeta;
  const sent = entries.get('join.momentum');
  let momentumBuffer: Float32Array | null = null;
  if (meta.momentum === 'f32' && sent instanceof Float32Array) momentumBuffer = sent;
  else if (meta.momentum !== null && meta.momentum !== 'f32' && sent instanceof Int32Array) {
    momentumBuffer = decodeMomentum(sent, meta.momentum, meta.blockSize, meta.parameters);
  } else if (meta.momentum !== null) {
    throw new DilocoArgumentError(
      { op: 'decodeJoinState', rank: -1 },
      'entries',
      `join.momentum is missing or not ${meta.momentum === 'f32' ? 'f32' : 'i32 words'}`,
    );
  }
  return {
    innerStep: meta.innerStep,
    outerStep: meta.outerStep,
    global,
    momentumBuffer,
    residual: null,
    shardResidual: null,
  };
}

/**
 * Rounds `momentum` in place to what `encodeJoinState` sends with `options`: every member calls it
 * at a join, so that members and newcomers step the same momentum ([Note: a compressed join]).
 */
export function roundJoinMomentum(momentum: Float32Array, options: JoinStateOptions = {}): void {
  const format = options.momentum ?? 'int8';
  const blockSize = options.blockSize ?? DEFAULT_BLOCK_SIZE;
  checkBlockSize(blockSize);
  if (format === 'f32') return;
  const words = encodeMomentum(momentum, format, blockSize);
  momentum.set(decodeMomentum(words, format, blockSize, momentum.length));
}

/** The bytes of a join of `parameters` f32 parameters with momentum (meta excluded). */
export function joinStateBytes(parameters: number, options: JoinStateOptions = {}): number {
  const format = options.momentum ?? 'int8';
  const blockSize = options.blockSize ?? DEFAULT_BLOCK_SIZE;
  const global = 4 * parameters;
  if (format === 'f32') return global + 4 * parameters;
  const words = Math.ceil(parameters / blockSize) * blockCodec(format, blockSize).wordsPerBlock;
  return global + 4 * words;
}
