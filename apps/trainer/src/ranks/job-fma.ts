import { gatherScalar, type ProcessGroup } from '@webshard/collectives';
import { type FmaSupport, relaxedFmaSupport } from '@webshard/tensor-core';
import type { TrainConfig } from '../config.js';

/** The answers of `relaxedFmaSupport` as numbers, for a collective. */
const SUPPORT: readonly FmaSupport[] = ['fused', 'unfused', 'none'];

/** The job's decision on the CPU matmul's fused multiply-add, and why. */
export interface JobFma {
  /** `--matmul-fma` for this rank's backend: `'auto'` only where every rank fuses. */
  matmulFma: 'auto' | 'off';
  /** Each rank's engine, by rank (one entry for a single process). */
  perRank: FmaSupport[];
}

/**
 * `--matmul-fma auto` decided for the whole job ([Note: relaxed FMA, chosen once per job] in
 * tensor-core): every rank says what its engine does with relaxed SIMD's multiply-add, and the
 * fused matmul runs only where all of them fuse, so a tab and the Node ranks of one job, or
 * machines of two CPU generations, compute the same bits. A collective where `group` has several
 * ranks (every rank calls it once, before its backend exists); `--matmul-fma off` asks nothing.
 */
export async function agreeOnFma(
  config: TrainConfig,
  group: ProcessGroup | null,
  support: () => FmaSupport = relaxedFmaSupport,
): Promise<JobFma> {
  if (config.matmulFma === 'off') return { matmulFma: 'off', perRank: [] };
  const mine = support();
  const perRank =
    group === null || group.size === 1
      ? [mine]
      : (await gatherScalar(group, SUPPORT.indexOf(mine))).map((code) => SUPPORT[code] ?? 'none');
  return { matmulFma: perRank.every((s) => s === 'fused') ? 'auto' : 'off', perRank };
}

/** A line for the log where `auto` was asked and some rank cannot fuse; null where nothing to say. */
export function fmaOffReason(job: JobFma): string | null {
  if (job.matmulFma === 'auto' || job.perRank.length === 0) return null;
  const which = job.perRank
    .map((s, rank) => (s === 'fused' ? null : `rank ${rank}: ${s}`))
    .filter((s) => s !== null);
  return `matmul FMA off: not every rank fuses relaxed SIMD's multiply-add (${which.join(', ')})`;
}
