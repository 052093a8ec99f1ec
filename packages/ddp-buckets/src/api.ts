import type { ProcessGroup } from '@webshard/collectives';
import type { Tensor } from '@webshard/tensor-core';
import { DdpArgumentError } from './errors.js';

/** Options of `DistributedDataParallel`; each has apex's meaning (see the README). */
export interface DistributedDataParallelOptions {
  /** The ranks that train together; every rank of it wraps the same module. */
  group: ProcessGroup;
  /**
   * A bucket closes once it holds at least this many elements. Default 10 000 000 (apex's default).
   */
  messageSize?: number;
  /**
   * Reduce after backward only: one flat all-reduce per dtype, no overlap. Default false. `'auto'`
   * times a few steps each way and keeps the faster ([Note: choosing overlap by measurement]).
   */
  delayAllreduce?: boolean | 'auto';
  /**
   * Parameters whose gradients, when ready, close the current bucket (apex's
   * `allreduce_trigger_params`): buckets are cut there instead of by `messageSize`.
   */
  allreduceTriggerParams?: readonly Tensor[];
  /** After the reduction, gradients are views of the bucket's reduced flat tensor. Default false. */
  retainAllreduceBuffers?: boolean;
  /** Reduce f16 and bf16 gradients in an f32 bucket. Default false. */
  allreduceAlwaysFp32?: boolean;
  /** Divide the summed gradients by the group size (an average). Default true. */
  gradientAverage?: boolean;
  /**
   * Divide gradients by this factor before the all-reduce and by `size / factor` after it (when
   * averaging), to keep low-precision sums in range. Default 1.
   */
  gradientPredivideFactor?: number;
}

/** The options with defaults filled in, checked. */
export interface ResolvedOptions {
  readonly group: ProcessGroup;
  readonly messageSize: number;
  readonly delayAllreduce: boolean | 'auto';
  readonly allreduceTriggerParams: ReadonlySet<Tensor> | null;
  readonly retainAllreduceBuffers: boolean;
  readonly allreduceAlwaysFp32: boolean;
  readonly gradientAverage: boolean;
  readonly gradientPredivideFactor: number;
}

/** apex's default bucket size in elements. */
export const DEFAULT_MESSAGE_SIZE = 10_000_000;

const OP = 'DistributedDataParallel';

/** Checks the options and fills in defaults; throws `DdpArgumentError` naming the bad option. */
export function resolveOptions(options: DistributedDataParallelOptions): ResolvedOptions {
  const group = options?.group;
  if (
    group === undefined ||
    group === null ||
    typeof group.allReduce !== 'function' ||
    typeof group.allocate !== 'function'
  ) {
    throw new DdpArgumentError(
      { op: OP, rank: -1 },
      'group',
      'options.group must be a ProcessGroup',
    );
  }
  const rank = group.rank;
  const fail = (option: string, detail: string): never => {
    throw new DdpArgumentError({ op: OP, rank }, option, detail);
  };
  if (!Number.isSafeInteger(group.size) || group.size < 1 || rank < 0 || rank >= group.size) {
    fail('group', `a group of size ${group.size} with rank ${rank} cannot train`);
  }
  const messageSize = options.messageSize ?? DEFAULT_MESSAGE_SIZE;
  if (!Number.isSafeInteger(messageSize) || messageSize <= 0) {
    fail('messageSize', `messageSize must be a positive integer (elements), got ${messageSize}`);
  }
  const delay = options.delayAllreduce ?? false;
  if (delay !== true && delay !== false && delay !== 'auto') {
    fail('delayAllreduce', `delayAllreduce must be true, false or 'auto', got ${String(delay)}`);
  }
  const factor = options.gradientPredivideFactor ?? 1;
  if (!Number.isFinite(factor) || factor <= 0) {
    fail(
      'gradientPredivideFactor',
      `gradientPredivideFactor must be a positive number, got ${factor}`,
    );
  }
  return {
    group,
    messageSize,
    delayAllreduce: delay,
    allreduceTriggerParams:
      options.allreduceTriggerParams === undefined ? null : new Set(options.allreduceTriggerParams),
    retainAllreduceBuffers: options.retainAllreduceBuffers ?? false,
    allreduceAlwaysFp32: options.allreduceAlwaysFp32 ?? false,
    gradientAverage: options.gradientAverage ?? true,
    gradientPredivideFactor: factor,
  };
}
