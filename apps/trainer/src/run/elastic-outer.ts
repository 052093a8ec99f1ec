import {
  averageScalar,
  broadcastState,
  broadcastStateWhereDifferent,
  type ElasticGroup,
  type StateValue,
} from '@webshard/collectives';
import type { DiLoCo, JoinCatchUp } from '@webshard/diloco';
import { faultPoint } from '#platform';
import type { StepRecord } from '../progress.js';
import { type OuterSyncReport, outerSyncFields } from '../strategy/prepared-model.js';
import { addOptimizerEntries, applyOptimizer } from './elastic-state.js';
import type { Run } from './set-up.js';

/*
 * [Note: diloco members that come and go]
 * Under `--elastic` with `--strategy diloco` the members meet only at outer syncs (every
 * `--inner-steps` steps and after the last): between them a member trains alone, and a member
 * lost there is found at the next sync. At an outer sync point the members meet the coordinator
 * first (`elastic.sync`): a member later than the coordinator's `--sync-timeout` is dropped there
 * and left out of this sync instead of holding everyone, and newcomers are admitted. After a
 * change the members regroup DiLoCo onto the new world, then run the outer sync over it; a member
 * lost in the outer sync changes nothing ([Note: DiLoCo in an elastic world] in @webshard/diloco),
 * so the point starts again, with the world that is left. A newcomer takes the step and whether
 * the world is at an outer sync point (`pending`, always so after a change) from rank 0, and the
 * world's state in slices from the members while they train on ([Note: a diloco join that does
 * not stop the world] in ./elastic-join.ts; with streamed syncs, and in a job's first epoch, it
 * takes rank 0's whole state at once instead: the global copy, the outer momentum, the step counts
 * and AdamW's state, `shareOuterState`; in the first epoch every member offers its own global copy
 * and momentum, and what all of them hold already, built from one seed, is not sent: GPT-2's
 * global copy took 200 s to broadcast over broadband-20); it runs that sync with the others, with no pseudo-gradient
 * of its own. A member
 * that was dropped (frozen, or late) and admitted again is a newcomer too: its pseudo-gradient is
 * stale and never reaches the world. Each sync weighs a member with one (`hasDelta`: it trained
 * since the last global copy) by size / contributors and one without by 0 (`syncOuter`, an average
 * of the flags first), so the average is the contributors'. Survivors keep their own AdamW state,
 * as DiLoCo's workers do. Every member prints a digest of the global copy after a change, so a
 * test sees that a newcomer holds the world's bits. Streamed syncs meet where a fragment is
 * issued instead: [Note: streamed syncs in an elastic world] in ./elastic-stream.ts.
 */

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function dilocoOf(run: Run): DiLoCo {
  const diloco = run.prepared.outer?.diloco ?? null;
  if (diloco === null) throw new Error('the diloco strategy is not started');
  return diloco;
}

/**
 * Every member calls it after a change (and a newcomer once admitted): rank 0 sends the step,
 * whether the world is at an outer sync point (`pending`), DiLoCo's global state and its AdamW; a
 * `newcomer` loads them (streamed, every member takes the global copy), the others keep their
 * own. `fresh` (the job's first epoch: every member built its model from the seed and nobody
 * trained): each member offers its own global copy and momentum, and an entry every member holds
 * bit for bit is not sent (`broadcastStateWhereDifferent`). Returns rank 0's step, `pending`, the
 * bytes received and the entries not sent.
 */
export async function shareOuterState(
  run: Run,
  elastic: ElasticGroup,
  step: number,
  pending: boolean,
  newcomer: boolean,
  fresh = false,
): Promise<{ step: number; pending: boolean; bytes: number; skipped: string[] }> {
  const lead = elastic.group.rank === 0;
  let entries: Map<string, StateValue> | undefined;
  if (lead) {
    const state = await dilocoOf(run).readStateDict();
    const meta = { step, pending, innerStep: state.innerStep, outerStep: state.outerStep };
    entries = new Map<string, StateValue>([
      ['outer.meta', encoder.encode(JSON.stringify(meta))],
      ['outer.global', state.global],
      ...(state.momentumBuffer === null
        ? []
        : [['outer.momentum', state.momentumBuffer] as [string, StateValue]]),
    ]);
    await addOptimizerEntries(run, entries);
  } else if (fresh) {
    const state = await dilocoOf(run).readStateDict();
    entries = new Map<string, StateValue>([
      ['outer.global', state.global],
      ...(state.momentumBuffer === null
        ? []
        : [['outer.momentum', state.momentumBuffer] as [string, StateValue]]),
    ]);
  }
  // A fault point where the others wait in the digests' exchange for this member (a test freezes
  // it here: [Note: the trainer's fault points]).
  if (fresh) faultPoint('digest');
  // Only a fresh world compares: after training, only a newcomer lacks the state, and it has none.
  const { state: received, skipped } = fresh
    ? await broadcastStateWhereDifferent(elastic.group, entries)
    : { state: await broadcastState(elastic.group, entries), skipped: [] as string[] };
  const meta = JSON.parse(decoder.decode(received.get('outer.meta'))) as {
    step: number;
    pending: boolean;
    innerStep: number;
    outerStep: number;
  };
  const diloco = dilocoOf(run);
  // Streamed, every member takes rank 0's global copy, a survivor keeping its own parameters
  // ([Note: streamed syncs in an elastic world] in ./elastic-stream.ts).
  const streamed = diloco.options.streamed;
  if ((newcomer && !lead) || streamed) {
    const keep = newcomer ? null : await Promise.all(run.prepared.params.map((p) => p.read()));
    await diloco.loadStateDict({
      // Streamed, the count is the world's step, so the fragment schedule is the same everywhere.
      innerStep: streamed ? meta.step - (meta.pending ? 1 : 0) : meta.innerStep,
      outerStep: meta.outerStep,
      global: received.get('outer.global') as Float32Array,
      momentumBuffer: (received.get('outer.momentum') as Float32Array | undefined) ?? null,
      residual: newcomer ? null : diloco.stateDict().residual,
      shardResidual: null,
    });
    for (const [i, values] of keep?.entries() ?? []) {
      run.prepared.params[i]!.write(values as Float32Array);
    }
    if (newcomer && !lead) await applyOptimizer(run, received);
  }
  let bytes = 0;
  for (const [name, value] of received) if (!skipped.includes(name)) bytes += value.byteLength;
  return { step: meta.step, pending: meta.pending, bytes, skipped };
}

/**
 * One outer sync over the current group, weighted ([Note: diloco members that come and go]):
 * null when no member has a pseudo-gradient (nothing to average).
 */
export async function syncOuter(
  run: Run,
  hasDelta: boolean,
  catchUp?: JoinCatchUp,
): Promise<OuterSyncReport | null> {
  const diloco = dilocoOf(run);
  const share = await averageScalar(diloco.group, hasDelta ? 1 : 0);
  if (share === 0) return null;
  if (catchUp !== undefined) {
    // Still downloading: weight 0, the average kept ([Note: a diloco join that does not stop the world]).
    await catchUp.outerSync();
    return null;
  }
  const before = diloco.bytesSent;
  const start = performance.now();
  // A dense average is over every member, so a contributor gives 1 / share; topk averages each
  // position over the members that sent it, and a member without a delta sends nothing, so a
  // contributor gives 1 ([Note: averaging sparse contributions] in @webshard/diloco).
  const contributorWeight = diloco.options.compression === 'topk' ? 1 : 1 / share;
  await diloco.outerSync({ weight: hasDelta ? contributorWeight : 0 });
  const ms = performance.now() - start;
  return {
    outerStep: diloco.outerStep,
    bytesSent: diloco.bytesSent - before,
    syncMs: ms,
    waitMs: ms,
  };
}

/**
 * A member's step `record` as its log line has it: the time from `started` (the step's outer sync
 * point, or its streamed fragment's) in the step's time and tokens a second, and the sync's
 * fields when it ran one, as a step of a run without `--elastic` has them (the sync inside its
 * `afterStep`).
 */
export function withOuterSync(
  record: StepRecord,
  report: OuterSyncReport | null,
  started: number,
): StepRecord {
  const ms = record.ms + (performance.now() - started);
  return {
    ...record,
    ms,
    tokensPerSecond: (record.tokensPerSecond * record.ms) / ms,
    ...(report === null ? {} : outerSyncFields(report)),
  };
}

/** FNV-1a over the global copy's bytes, as hex: the same on every member after a sync. */
export async function globalDigest(run: Run): Promise<string> {
  let hash = 0x811c9dc5;
  for await (const chunk of dilocoOf(run).globalChunks()) {
    const bytes = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    for (const byte of bytes) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
  }
  return hash.toString(16).padStart(8, '0');
}
