import { CollectiveError, type ElasticGroup, type MembershipChange } from '@webshard/collectives';
import { faultPoint, removePartialCheckpoints, resolveResume } from '#platform';
import type { TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';
import { checkSameBackend } from '../ranks/job-backend.js';
import { agreeOnFma } from '../ranks/job-fma.js';
import { prepareModel } from '../strategy/prepare.js';
import type { RunIO } from './run-io.js';
import { disposeLocalBuild, type LocalBuild, type Run, setUpRun } from './set-up.js';

// The strategy moved onto a new epoch's world ([Note: elastic training in the trainer] in
// ./elastic-run.ts): DDP and DiLoCo rebuilt over the new group, FSDP restarted from its checkpoint.

/**
 * Whether `error` means a member was lost (a collective failed, or the group is no longer ready):
 * a change of world to sync, not a fault of this member.
 */
export function memberLost(elastic: ElasticGroup, error: unknown): boolean {
  return elastic.group.state !== 'ready' || CollectiveError.isInstance(error);
}

/**
 * `attempt` until it completes in one world: where a member is lost in it, the failure is synced
 * and `attempt` runs again in the next world, given that change (`first` the first time). `what`
 * names it in the error thrown if the world did not change.
 */
export async function acrossChanges<T>(
  elastic: ElasticGroup,
  what: string,
  first: MembershipChange | null,
  attempt: (change: MembershipChange | null) => Promise<T>,
): Promise<T> {
  let change = first;
  for (;;) {
    try {
      return await attempt(change);
    } catch (error) {
      if (!memberLost(elastic, error)) throw error;
    }
    change = await elastic.sync({ failed: true });
    if (change === null) throw new Error(`${what} failed but the world did not change`);
  }
}

/** The world's size checked against the batch: every member must take whole micro-batches. */
export function checkBatch(config: TrainConfig, worldSize: number): void {
  if (config.batchSize % (worldSize * config.gradAccum) !== 0) {
    throw new UsageError(
      `--elastic: --batch-size ${config.batchSize} does not divide over the world's ${worldSize} members x --grad-accum ${config.gradAccum}: choose a batch size that every world size from --min-world-size to --max-world-size divides`,
      { option: '--batch-size' },
    );
  }
}

/** The group of the new epoch under the strategy: DDP rebuilt, the lead and its printing moved. */
export async function enterEpoch(
  run: Run,
  config: TrainConfig,
  elastic: ElasticGroup,
): Promise<void> {
  const { group, membership } = elastic;
  checkBatch(config, membership.worldSize);
  run.prepared.release?.();
  // A newcomer's set-up asks every rank about the matmul's fused multiply-add (a collective): the
  // others answer in the same order. Their backends exist already and keep their kernel; the
  // parameters stay the same everywhere (one averaged gradient, rank 0's state after a change).
  const fma = await agreeOnFma(config, group);
  if (fma.matmulFma !== run.config.matmulFma) {
    run.say(
      `elastic: matmul FMA ${fma.matmulFma} for the newcomers, ${run.config.matmulFma} on the members before`,
    );
  }
  run.config = { ...config, worldSize: membership.worldSize, matmulFma: run.config.matmulFma };
  run.group = group;
  run.lead = group.rank === 0;
  run.say = (line) => {
    if (group.rank === 0) run.io.stdout(`${line}\n`);
  };
  if (group.size > 1) await checkSameBackend(group, run.backend);
  run.prepared = prepareModel(run.model, run.config, group, run.backend);
}

/** The newest complete checkpoint in `--checkpoint-dir`, or null before the first. */
async function latestCheckpoint(config: TrainConfig): Promise<string | null> {
  if (config.checkpointDir === null) return null;
  return resolveResume(config.checkpointDir).catch(() => null);
}

/**
 * FSDP's state is sharded: a member that leaves takes its shards with it. So every epoch of a
 * sharded run starts over from the last sharded checkpoint (which loads at any world size), or
 * from the seeded initialization before the first: the model, FSDP and AdamW built anew for the
 * new world ([Note: elastic training in the trainer]).
 */
export async function restartSharded(
  config: TrainConfig,
  io: RunIO,
  elastic: ElasticGroup,
  before: Run | null,
  prebuilt: LocalBuild | null = null,
): Promise<Run> {
  if (before !== null) {
    if (before.modelBackend !== before.backend) before.modelBackend.dispose();
    before.backend.dispose();
  }
  let resume: string | null;
  try {
    checkBatch(config, elastic.membership.worldSize);
    if (config.checkpointDir !== null) {
      // What the world before left half-written goes first, before any rank begins a checkpoint.
      if (elastic.group.rank === 0) await removePartialCheckpoints(config.checkpointDir);
      await elastic.group.barrier().wait();
    }
    resume = await latestCheckpoint(config);
  } catch (error) {
    if (prebuilt !== null) disposeLocalBuild(prebuilt);
    throw error;
  }
  return setUpRun(
    { ...config, worldSize: elastic.membership.worldSize, resume },
    io,
    elastic.group,
    prebuilt,
  );
}

/**
 * A member's set-up for the job's first world: the run built over it ([Note: elastic training in
 * the trainer]). The set-up's own collectives (the matmul's FMA agreed, the backends compared,
 * FSDP's checkpoint barrier) are a regroup's too: a member lost in them (frozen, its tab closed)
 * only means another world, in which the set-up runs again. A member passes a fault point first
 * (`setup`, [Note: the trainer's fault points]). `prebuilt`: what it built before it asked to join
 * ([Note: a member builds before it joins]), used by the first attempt (a failed one gives it back;
 * the next builds anew).
 */
export async function setUpMember(
  config: TrainConfig,
  io: RunIO,
  elastic: ElasticGroup,
  prebuilt: LocalBuild | null = null,
): Promise<Run> {
  let unused = prebuilt;
  faultPoint('setup');
  return acrossChanges(elastic, 'a set-up', null, () => {
    const local = unused;
    unused = null;
    if (config.strategy === 'fsdp') return restartSharded(config, io, elastic, null, local);
    try {
      checkBatch(config, elastic.membership.worldSize);
    } catch (error) {
      if (local !== null) disposeLocalBuild(local);
      throw error;
    }
    return setUpRun(
      { ...config, worldSize: elastic.membership.worldSize },
      io,
      elastic.group,
      local,
    );
  });
}
