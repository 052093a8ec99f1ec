// What registered-churn tests run on every rank: FSDP's pattern of registered buffers. Each step
// gathers every unit's full buffer from its registered shard (the next unit's gather issued before
// the current one is awaited, as prefetch does), frees the full buffer, and reduce-scatters a
// freshly allocated registered gradient into a registered output, freeing both once done; sizes
// vary by unit and step, so freed buffers come back at other units' offsets. Some operands are CPU
// tensors over the registered arrays (`tensorFromHostArray`), as FSDP's are.
import { createCpuBackend } from '@webshard/tensor-core';
import { tensorFromHostArray } from '@webshard/tensor-core/backend';
import type { ProcessGroup } from '../process-group.js';
import { shardRange } from '../shard.js';

export interface ChurnJob {
  readonly steps: number;
  /** Elements of each unit's full buffer at step 0; later steps add `step * 64 * unit`. */
  readonly counts: readonly number[];
  /** Gathers issued ahead of the one awaited (FSDP's `limitAllGathers`). */
  readonly ahead: number;
}

export interface ChurnReport {
  /** What went wrong, at most a few lines: empty when every result matched. */
  readonly errors: string[];
  /** Collectives run. */
  readonly ops: number;
  /** Of those, the ones that copied an operand through the transport's staging. */
  readonly stagedOps: number;
  /** `group.allocatesRegistered`. */
  readonly registered: boolean;
}

/** Element i of rank r's shard of unit u at step s: small integers, so sums in f32 are exact. */
export function churnValue(step: number, unit: number, rank: number, i: number): number {
  return ((i * 7 + unit * 131 + step * 17 + rank * 1009) % 2048) - 1024;
}

/** Runs the job on this rank's group; see the file comment. */
export async function runChurn(group: ProcessGroup, job: ChurnJob): Promise<ChurnReport> {
  const backend = createCpuBackend();
  const { rank, size } = group;
  const errors: string[] = [];
  let ops = 0;
  const note = (message: string) => {
    if (errors.length < 8) errors.push(`rank ${rank}: ${message}`);
  };
  for (let step = 0; step < job.steps; step++) {
    const counts = job.counts.map((c, unit) => c + step * 64 * unit);
    // Shards, allocated this step (the previous step's were freed at its end).
    const shards = counts.map((count, unit) => {
      const own = shardRange(count, size, rank);
      const shard = group.allocate('f32', own.count);
      for (let i = 0; i < own.count; i++) shard[i] = churnValue(step, unit, rank, own.start + i);
      return shard;
    });
    // Forward: gathers with `ahead` in flight, each full buffer freed once checked.
    const gathers: { unit: number; full: Float32Array; done: Promise<void> }[] = [];
    const issue = (unit: number) => {
      const full = group.allocate('f32', counts[unit]!);
      const asTensor = (unit + step) % 2 === 0;
      const input = asTensor ? tensorFromHostArray(backend, shards[unit]!) : shards[unit]!;
      const output = asTensor ? tensorFromHostArray(backend, full) : full;
      ops++;
      gathers.push({ unit, full, done: group.allGather(input, output).promise });
    };
    let next = 0;
    for (let unit = 0; unit < counts.length; unit++) {
      while (next < counts.length && next <= unit + job.ahead) issue(next++);
      const gather = gathers.shift()!;
      await gather.done;
      for (let i = 0; i < gather.full.length; i++) {
        const owner = shardRangeOwner(gather.full.length, size, i);
        const expected = churnValue(step, unit, owner.rank, i);
        if (gather.full[i] !== expected) {
          note(
            `step ${step} allGather of unit ${unit} (${gather.full.length} elements at byte ${gather.full.byteOffset}): element ${i} is ${gather.full[i]}, expected ${expected}`,
          );
          break;
        }
      }
      group.free(gather.full);
    }
    // Backward, last unit first: a registered gradient reduce-scattered into a registered output.
    const reductions: Promise<void>[] = [];
    for (let unit = counts.length - 1; unit >= 0; unit--) {
      const count = counts[unit]!;
      const grad = group.allocate('f32', count);
      for (let i = 0; i < count; i++) grad[i] = churnValue(step, unit, rank, i);
      const own = shardRange(count, size, rank);
      const out = group.allocate('f32', own.count);
      const asTensor = (unit + step) % 2 === 1;
      ops++;
      const work = group.reduceScatter(
        asTensor ? tensorFromHostArray(backend, grad) : grad,
        asTensor ? tensorFromHostArray(backend, out) : out,
      );
      reductions.push(
        work.promise.then(() => {
          for (let i = 0; i < own.count; i++) {
            let expected = 0;
            for (let r = 0; r < size; r++) expected += churnValue(step, unit, r, own.start + i);
            if (out[i] !== expected) {
              note(
                `step ${step} reduceScatter of unit ${unit} (${count} elements, output at byte ${out.byteOffset}): element ${i} is ${out[i]}, expected ${expected}`,
              );
              break;
            }
          }
          group.free(grad);
          group.free(out);
        }),
      );
    }
    await Promise.all(reductions);
    for (const shard of shards) group.free(shard);
  }
  return {
    errors,
    ops,
    stagedOps: group.stagingStats().stagedOps,
    registered: group.allocatesRegistered,
  };
}

/** Which rank's shard holds element i of `count` elements. */
function shardRangeOwner(count: number, size: number, i: number): { rank: number } {
  for (let r = 0; r < size; r++) {
    const range = shardRange(count, size, r);
    if (i >= range.start && i < range.start + range.count) return { rank: r };
  }
  return { rank: -1 };
}
