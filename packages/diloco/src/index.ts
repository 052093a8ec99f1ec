export type { DilocoOptions, ResolvedDilocoOptions } from './api.js';
export { resolveDilocoOptions } from './api.js';
export type { AverageStats, CompressedAverageOptions } from './compressed-average.js';
export { CompressedAverager } from './compressed-average.js';
export type { BlockCodec, BlockCompression } from './block-codec.js';
export type { CodecOptions, ResolvedCodecOptions } from './codec-options.js';
export type { OuterCompression } from './compression.js';
export {
  blockCodec,
  DEFAULT_BLOCK_SIZE,
  encodeWithFeedback,
  OUTER_COMPRESSIONS,
} from './compression.js';
export type {
  DilocoState,
  DilocoStateDict,
  DilocoStepResult,
  InnerOptimizer,
  OuterSyncStats,
} from './diloco-types.js';
export { DiLoCo } from './diloco.js';
export type { DilocoErrorFields } from './errors.js';
export { DilocoArgumentError, DilocoError, DilocoStateError } from './errors.js';
export { JoinCatchUp } from './join-catch-up.js';
export { packJoinEntries, unpackJoinEntries } from './join-pack.js';
export type { JoinEntries, JoinMomentum, JoinStateOptions } from './join-state.js';
export {
  decodeJoinState,
  encodeJoinState,
  joinStateBytes,
  roundJoinMomentum,
} from './join-state.js';
export type { OuterOptimizerOptions, OuterOptimizerState } from './outer-optimizer.js';
export type { OuterStateName, OuterStateStore, OuterStateWriter } from './outer-state-store.js';
export { MemoryOuterStateStore } from './outer-state-store.js';
export { STORE_CHUNK } from './stored-outer-state.js';
export { dealFragments, fragmentDue } from './fragment-schedule.js';
export { DEFAULT_STREAM_MIXING } from './streamed-fragments.js';
export { FRAGMENT_MERGES } from './fragment-merge.js';
export type { FragmentMerge } from './fragment-merge.js';
export { DEFAULT_OUTER_LR, DEFAULT_OUTER_MOMENTUM, OuterOptimizer } from './outer-optimizer.js';
export {
  DEFAULT_TOPK_CHUNK,
  DEFAULT_TOPK_DENSITY,
  DEFAULT_TOPK_ERROR_DECAY,
  encodeSparseWithFeedback,
  MAX_TOPK_CHUNK,
  TopkCodec,
} from './topk-codec.js';
export type { TopkLevels, TopkSegment, TopkTile } from './topk-layout.js';
export { DEFAULT_TOPK_LEVELS, TOPK_LEVELS } from './topk-layout.js';
