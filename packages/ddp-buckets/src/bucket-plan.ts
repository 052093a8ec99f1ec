import type { DType } from '@webshard/tensor-core';

/** What the plan needs to know about one parameter that requires grad. */
export interface PlanParam {
  readonly name: string;
  readonly dtype: DType;
  readonly size: number;
  /** Whether its gradient closes the open buckets (`allreduceTriggerParams`). */
  readonly trigger: boolean;
}

/** One bucket of the plan: parameter indices (into the plan's parameter list) and its dtype. */
export interface PlannedBucket {
  readonly dtype: DType;
  readonly params: readonly number[];
  /** Elements in the bucket. */
  readonly size: number;
}

/**
 * [Note: bucket order]
 * Buckets follow the order in which gradients became ready in the first (or last refreshed)
 * iteration, as apex and PyTorch do: backward produces gradients roughly in reverse order of the
 * forward, so the first bucket fills first and its all-reduce starts while later layers still run
 * backward. Each dtype has one open bucket; a parameter goes into the open bucket of its dtype,
 * which closes (and takes the next place in the bucket list) once it holds `messageSize` elements,
 * or, with trigger parameters, when a trigger's gradient arrives (then every open bucket closes).
 * Open buckets left at the end close in the order they were opened. Only rank 0's recorded order
 * counts: it is broadcast, so every rank builds the same plan and issues the same collectives.
 */
export function planBuckets(
  params: readonly PlanParam[],
  readyOrder: readonly number[],
  messageSize: number,
): PlannedBucket[] {
  const buckets: PlannedBucket[] = [];
  const open = new Map<DType, { params: number[]; size: number }>();
  const triggered = params.some((p) => p.trigger);
  const close = (dtype: DType) => {
    const bucket = open.get(dtype);
    if (bucket === undefined) return;
    open.delete(dtype);
    buckets.push({ dtype, params: bucket.params, size: bucket.size });
  };
  for (const index of readyOrder) {
    const param = params[index]!;
    let bucket = open.get(param.dtype);
    if (bucket === undefined) {
      bucket = { params: [], size: 0 };
      open.set(param.dtype, bucket);
    }
    bucket.params.push(index);
    bucket.size += param.size;
    if (triggered) {
      if (param.trigger) for (const dtype of [...open.keys()]) close(dtype);
    } else if (bucket.size >= messageSize) {
      close(param.dtype);
    }
  }
  for (const dtype of [...open.keys()]) close(dtype);
  return buckets;
}

/** One bucket per dtype over every parameter, in `order` (delayAllreduce and refresh passes). */
export function planPerDType(
  params: readonly PlanParam[],
  order: readonly number[],
): PlannedBucket[] {
  return planBuckets(
    params.map((p) => ({ ...p, trigger: false })),
    order,
    Number.POSITIVE_INFINITY,
  );
}

/** Whether `order` lists each of `count` parameters exactly once. */
export function isPermutation(order: readonly number[], count: number): boolean {
  if (order.length !== count) return false;
  const seen = new Uint8Array(count);
  for (const i of order) {
    if (!Number.isInteger(i) || i < 0 || i >= count || seen[i] === 1) return false;
    seen[i] = 1;
  }
  return true;
}
