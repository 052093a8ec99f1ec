import type { ProcessGroup } from '@webshard/collectives';
import type { Backend, DType } from '@webshard/tensor-core';
import { FsdpConfigError } from './errors.js';
import { checkOptionNames } from './option-names.js';
import { resolveStrategy, type ShardingStrategy } from './sharding-strategy.js';
import type { SsdOffloadOptions } from './ssd/shard-store.js';

/** The 16-bit dtypes mixed precision computes in. */
export type ComputeDType = 'f16' | 'bf16';

/**
 * Options of `FullyShardedDataParallel`, with fairscale's names (camelCased) and meaning. Nested
 * wrappers created inside `enableWrap` take the options given there as defaults.
 */
export interface FsdpOptions {
  /**
   * The process group of the data-parallel ranks: the parameters are sharded over it, or with
   * `HYBRID_SHARD` / `NO_SHARD` over sub-groups of it (see `shardingStrategy`).
   */
  group: ProcessGroup;
  /**
   * PyTorch's sharding strategies ([Note: hybrid sharding]): `FULL_SHARD` (the default),
   * `SHARD_GRAD_OP` (`reshardAfterForward: false`), `HYBRID_SHARD` (shard inside a node of
   * `nodeSize` ranks, replicate across nodes) and `NO_SHARD` (replicate everywhere, all-reduce
   * gradients, as DDP). Every unit of a tree must use the same strategy. A `reshardAfterForward` or
   * `processGroupReduceScatter` that contradicts it is a `FsdpConfigError`.
   */
  shardingStrategy?: ShardingStrategy;
  /**
   * With `HYBRID_SHARD`: ranks per node, node-major (rank n * nodeSize + l is local rank l of node
   * n, as `webshard-run --nnodes` numbers them). Default the launcher's `LOCAL_WORLD_SIZE`.
   */
  nodeSize?: number;
  /**
   * A second group over the same ranks for the gradients' reduce-scatters, so they run beside the
   * all-gathers instead of queueing behind them (fairscale's `process_group_reduce_scatter`; the
   * root's is used for the whole tree). Default: `group`. Another size or rank than `group`'s is a
   * `FsdpConfigError` (fairscale falls back to `group` with a warning).
   */
  processGroupReduceScatter?: ProcessGroup;
  /**
   * The world size this unit is written for; a group of another size is an error. Defaults to the
   * group's size (no check).
   */
  worldSize?: number;
  /**
   * Flatten the unit's own parameters into one flat parameter (fairscale's `flatten_parameters`).
   * Default true. With false each parameter is sharded on its own: one all-gather and one
   * reduce-scatter per parameter instead of per unit.
   */
  flattenParameters?: boolean;
  /** Free the full parameters after forward and gather them again in backward. Default true. */
  reshardAfterForward?: boolean;
  /** Keep the root's full parameters between forward and backward (its backward comes first). Default true. */
  disableReshardOnRoot?: boolean;
  /**
   * Compute in `computeDtype` while the optimizer steps FP32 shards (fairscale's `mixed_precision`).
   * The shard is cast before the all-gather, so the gather moves half the bytes. Default false.
   */
  mixedPrecision?: boolean;
  /** The dtype of forward and backward under mixed precision. Default `f16`. */
  computeDtype?: ComputeDType;
  /** The dtype floating buffers are cast to under mixed precision. Default `computeDtype`. */
  bufferDtype?: DType;
  /** Reduce-scatter gradients in f32 under mixed precision (cast from the compute dtype first). Default false. */
  fp32ReduceScatter?: boolean;
  /**
   * Gradients are divided by this before the reduce-scatter and by `worldSize / factor` after it,
   * which keeps f16 sums in range. Default fairscale's: the smallest power of two f with f * f >=
   * worldSize (or that stops dividing it).
   */
  gradientPredivideFactor?: number;
  /**
   * Reduce-scatters of flat gradients whose shard is smaller than this many MiB wait in a bucket
   * that goes as one reduce-scatter when full or at the end of backward (fairscale's
   * `bucket_cap_mb`; [Note: reduce-scatter buckets]). Default 25; 0 sends each on its own.
   */
  bucketCapMb?: number;
  /** Keep the FP32 shard (and so the optimizer state) on the CPU backend while computing on `computeBackend`. */
  moveParamsToCpu?: boolean;
  /**
   * Keep each FP32 shard and its optimizer state in `store` between uses, not in memory (fairscale's
   * `ssd_offload`; [Note: shards in a store]): read in for each gather, prefetched as in memory, and
   * for the optimizer's own `step()` and `stateDict()` ([Note: the optimizer's own step through a
   * store]; with a store that cannot read synchronously, `stepOffloaded(model, optimizer)`).
   */
  ssdOffload?: SsdOffloadOptions;
  /**
   * The old name of `moveParamsToCpu` (fairscale's `cpu_offload`): accepted with a warning; giving
   * both with different values is an error.
   * @deprecated Use `moveParamsToCpu`.
   */
  cpuOffload?: boolean;
  /**
   * Keep the sharded FP32 gradient on the CPU backend. Default `moveParamsToCpu`; it must equal it,
   * since the optimizer steps each shard with its gradient on one backend.
   */
  moveGradsToCpu?: boolean;
  /** Without mixed precision, cast floating inputs of the root to f32. Default false. */
  forceInputToFp32?: boolean;
  /**
   * Free tensor-core's autocast cast cache after each unit's forward (fairscale's
   * `clear_autocast_cache`, which calls `torch.clear_autocast_cache()`): inside one `autocast`
   * scope, a parameter gathered again with new values (after a step, or another unit's
   * all-gather into the same storage) would otherwise compute with the cast made before. Default
   * false, as fairscale.
   */
  clearAutocastCache?: boolean;
  /**
   * The most units whose full parameters a prefetch may have gathered at once, besides the unit
   * computing (PyTorch's `limit_all_gathers`): with a limit of L, a unit issues the gathers of the
   * (up to L) units after it, as FSDP2's `set_modules_to_forward_prefetch` with several modules
   * ([Note: prefetching several units ahead] in state.ts). Default 1; 0 turns prefetching off.
   */
  limitAllGathers?: number;
  /**
   * Where forward and backward run. Default: the backend the parameters are on. With
   * `moveParamsToCpu`, the parameters' backend is where they are kept and this is where they are
   * gathered to.
   */
  computeBackend?: Backend;
  /** `toString()` shows every option of each unit, not only fairscale's three. Default false. */
  verbose?: boolean;
  /**
   * Allow `resetParameters()` after wrapping (fairscale's `allow_reset_parameters`): it calls the
   * wrapped module's `resetParameters()` with the full parameters gathered. Default false.
   */
  allowResetParameters?: boolean;
}

/** The options with every default filled in. */
export interface ResolvedOptions {
  /** The group parameters are sharded over: `FsdpOptions.group`, or its node's sub-group. */
  readonly group: ProcessGroup;
  readonly shardingStrategy: ShardingStrategy;
  /**
   * The same shard's ranks on the other nodes, over which reduced gradients are all-reduced
   * (`HYBRID_SHARD` on several nodes, `NO_SHARD`); null otherwise.
   */
  readonly replicateGroup: ProcessGroup | null;
  readonly processGroupReduceScatter: ProcessGroup;
  readonly flattenParameters: boolean;
  readonly reshardAfterForward: boolean;
  readonly disableReshardOnRoot: boolean;
  readonly mixedPrecision: boolean;
  readonly computeDtype: DType;
  readonly bufferDtype: DType;
  readonly fp32ReduceScatter: boolean;
  readonly bucketCapMb: number;
  readonly gradientPredivideFactor: number;
  readonly gradientPostdivideFactor: number;
  readonly moveParamsToCpu: boolean;
  readonly moveGradsToCpu: boolean;
  readonly ssdOffload: SsdOffloadOptions | undefined;
  readonly forceInputToFp32: boolean;
  readonly clearAutocastCache: boolean;
  readonly limitAllGathers: number;
  readonly computeBackend: Backend | undefined;
  readonly verbose: boolean;
  readonly allowResetParameters: boolean;
}

/** fairscale's default pre-divide factor: powers of two while they divide and stay below sqrt(n). */
export function defaultPredivideFactor(worldSize: number): number {
  let factor = 1;
  while (worldSize % factor === 0 && worldSize / factor > factor) factor *= 2;
  return factor;
}

/** Throw a `FsdpConfigError` unless `value` is a finite number > 0. */
export function finitePositive(op: string, name: string, value: number): void {
  if (!Number.isFinite(value) || value <= 0) {
    throw new FsdpConfigError(op, `${name} must be a finite number > 0, got ${value}`);
  }
}

/**
 * Check the options and fill in the defaults; throws `FsdpConfigError` naming the option, or for
 * an unknown name the nearest known one.
 */
export function resolveOptions(options: FsdpOptions): ResolvedOptions {
  const op = 'FullyShardedDataParallel';
  const moveParamsToCpu = checkOptionNames(op, options ?? {}) ?? false;
  const group = options.group as ProcessGroup | undefined;
  if (group === undefined || group === null || typeof group.allGather !== 'function') {
    throw new FsdpConfigError(op, 'options.group must be a ProcessGroup');
  }
  if (options.worldSize !== undefined && options.worldSize !== group.size) {
    throw new FsdpConfigError(
      op,
      `worldSize is ${options.worldSize} but the group has ${group.size} ranks (rank ${group.rank})`,
    );
  }
  const worldSize = group.size;
  const mixedPrecision = options.mixedPrecision ?? false;
  const computeDtype: DType = mixedPrecision ? (options.computeDtype ?? 'f16') : 'f32';
  if (mixedPrecision && computeDtype !== 'f16' && computeDtype !== 'bf16') {
    throw new FsdpConfigError(op, `computeDtype must be 'f16' or 'bf16', got '${computeDtype}'`);
  }
  if (!mixedPrecision && options.computeDtype !== undefined) {
    throw new FsdpConfigError(op, 'computeDtype needs mixedPrecision: true');
  }
  const bucketCapMb = options.bucketCapMb ?? 25;
  if (!Number.isFinite(bucketCapMb) || bucketCapMb < 0) {
    throw new FsdpConfigError(op, `bucketCapMb must be a finite number >= 0, got ${bucketCapMb}`);
  }
  // Divide factors count every data-parallel rank: replicas average too ([Note: hybrid sharding]).
  const pre = options.gradientPredivideFactor ?? defaultPredivideFactor(worldSize);
  finitePositive(op, 'gradientPredivideFactor', pre);
  const limitAllGathers = options.limitAllGathers ?? 1;
  if (!Number.isInteger(limitAllGathers) || limitAllGathers < 0) {
    throw new FsdpConfigError(
      op,
      `limitAllGathers must be an integer >= 0, got ${limitAllGathers}`,
    );
  }
  if (options.moveGradsToCpu !== undefined && options.moveGradsToCpu !== moveParamsToCpu) {
    throw new FsdpConfigError(
      op,
      `moveGradsToCpu (${options.moveGradsToCpu}) must equal moveParamsToCpu (${moveParamsToCpu}): the optimizer steps each shard with its gradient on one backend`,
    );
  }
  const reduceScatter = options.processGroupReduceScatter ?? group;
  if (typeof reduceScatter?.reduceScatter !== 'function') {
    throw new FsdpConfigError(op, 'options.processGroupReduceScatter must be a ProcessGroup');
  }
  if (reduceScatter.size !== group.size || reduceScatter.rank !== group.rank) {
    throw new FsdpConfigError(
      op,
      `processGroupReduceScatter is rank ${reduceScatter.rank} of ${reduceScatter.size}, group rank ${group.rank} of ${group.size}: it must hold the same ranks`,
    );
  }
  const ssdOffload = checkSsdOffload(op, options.ssdOffload);
  // Last, once every option is checked: it may make sub-groups.
  const strategy = resolveStrategy(op, group, options);
  return {
    group: strategy.shard,
    shardingStrategy: options.shardingStrategy ?? 'FULL_SHARD',
    replicateGroup: strategy.replicate,
    processGroupReduceScatter: options.processGroupReduceScatter ?? strategy.shard,
    flattenParameters: options.flattenParameters ?? true,
    reshardAfterForward: strategy.reshardAfterForward,
    disableReshardOnRoot: options.disableReshardOnRoot ?? true,
    mixedPrecision,
    computeDtype,
    bufferDtype: mixedPrecision ? (options.bufferDtype ?? computeDtype) : 'f32',
    fp32ReduceScatter: options.fp32ReduceScatter ?? false,
    bucketCapMb,
    gradientPredivideFactor: pre,
    gradientPostdivideFactor: worldSize / pre,
    moveParamsToCpu,
    moveGradsToCpu: moveParamsToCpu,
    ssdOffload,
    forceInputToFp32: options.forceInputToFp32 ?? false,
    clearAutocastCache: options.clearAutocastCache ?? false,
    limitAllGathers,
    computeBackend: options.computeBackend,
    verbose: options.verbose ?? false,
    allowResetParameters: options.allowResetParameters ?? false,
  };
}

/** `ssdOffload` as given, or a `FsdpConfigError` when it has no usable `store`. */
function checkSsdOffload(
  op: string,
  ssd: SsdOffloadOptions | undefined,
): SsdOffloadOptions | undefined {
  if (ssd === undefined) return undefined;
  const store = (ssd as { store?: Partial<SsdOffloadOptions['store']> }).store;
  if (typeof store?.read !== 'function' || typeof store.write !== 'function') {
    throw new FsdpConfigError(
      op,
      'ssdOffload needs { store }, a ShardStore such as NodeFileStore or OpfsStore',
    );
  }
  return ssd;
}
