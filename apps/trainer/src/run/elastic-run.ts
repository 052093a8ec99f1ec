import { type ElasticGroup, joinElastic, type MembershipChange } from '@webshard/collectives';
import { appendLog, faultPoint, openLog, readTlsFiles } from '#platform';
import type { TrainConfig } from '../config.js';
import { InterruptedError } from '../errors.js';
import { logLine } from '../io/log-line.js';
import { createProgress, type StepRecord } from '../progress.js';
import type { OuterSyncReport } from '../strategy/prepared-model.js';
import {
  acrossChanges,
  enterEpoch,
  memberLost,
  restartSharded,
  setUpMember,
} from './elastic-epoch.js';
import {
  finishDownload,
  type JoinDownload,
  type JoinProgress,
  shareOuterStateInSlices,
} from './elastic-join.js';
import { globalDigest, shareOuterState, syncOuter, withOuterSync } from './elastic-outer.js';
import { shareRunState } from './elastic-state.js';
import { streamBetween, streamPoint } from './elastic-stream.js';
import { finishRun } from './finish.js';
import { oneStep, saveCheckpoint } from './loop.js';
import { buildLocal, disposeLocalBuild } from './set-up.js';
import { agreeOnFma } from '../ranks/job-fma.js';
import type { RunIO, TrainSummary } from './run-io.js';

/*
 * [Note: elastic training in the trainer]
 * `--elastic URL` makes this process one member of an elastic world (DDP, FSDP or DiLoCo, whose
 * members meet at outer syncs only: [Note: diloco members that come and go]) whose coordinator runs at
 * URL (`webshard-train --elastic-coordinator PORT`; [Note: elastic membership] in collectives).
 * The world size is the coordinator's: each epoch's config has `worldSize` set to it, so every
 * member takes its share of the same global batch (`--batch-size` must divide by every world size
 * the job may have, times `--grad-accum`). After every step each member reaches a sync point; a
 * step that failed because a member died (its collectives abort) is not counted and runs again in
 * the new world. So that a failed step never moved the parameters, its gradients are cleared
 * (`accumulatedStep`) and no collective of the loop follows the optimizer's update (the step
 * records leave out the per-rank fields): the tab test found both, a failed attempt's gradients
 * added to the step run again, and a member lost in the memory gathers after the update moving
 * the parameters twice (a loss 0.8-1.9 % off one process's). After a change, under DDP the members rebuild DDP over the new group and take
 * rank 0's state ([Note: the trainer's elastic state]); under FSDP, whose state is sharded (a
 * member that left took its shards), every member builds the run anew for the new world and
 * restarts from the last sharded checkpoint of `--checkpoint-dir` (`restartSharded`). The job's
 * first share (rank 0's state, or a diloco world's digests) is a regroup like the others: a member
 * lost in it means another change and the share again (a member frozen in the digests' exchange
 * made the others exit 1 before), and so is the set-up's own collectives (the matmul's FMA, the
 * backend check: `setUpMember`, which builds the run again in the next world). Rank 0 writes a
 * `membership` line to the JSONL log (epoch, world size, who left, who joined, the steps done) for
 * each world that shared its state; a world that changed before its share ended has none.
 */

/*
 * [Note: a member builds before it joins]
 * A member builds its own part of the run (the data, the backend, the model from its seed:
 * `buildLocal` in ./set-up.ts) before it asks the coordinator to join, not after it is admitted.
 * Admitted, a newcomer meets the members at once in the set-up's collectives (the matmul's FMA, the
 * backend check) and the state's share, and they wait for it there: after admission they waited
 * for its whole build, some 30 s of one core for GPT-2 124M (its 124 M normal draws), every time
 * a tab or a laptop joined. Built first, the members train on while it builds and meet it ready.
 * What moves with it: the backend is made with the member's own FMA choice (all it can know before
 * it meets the world); where the job's agreed choice differs (a rank of the job cannot fuse), the
 * build is given back and made again after admission, as before. The memory estimate needs the
 * world's size, so it is checked after admission, before the strategy and AdamW allocate: the
 * model's own parameters (a quarter of the estimate's 16 bytes a parameter) are made before it.
 * A first world's members build side by side before they meet, where they built after. Test:
 * `ranks/elastic-join.test.ts` (a newcomer whose build takes 6 s; the members' steps go on).
 */

/** An error in one line, its type first: what a member prints when a step fails under it. */
function failure(error: unknown): string {
  const name = error instanceof Error ? error.name : 'Error';
  const message = error instanceof Error ? error.message : String(error);
  return `${name}: ${message.split('\n')[0]}`;
}

function membershipLine(change: MembershipChange, step: number): string {
  const { epoch, worldSize, members, left, joined } = change;
  return `${JSON.stringify({ event: 'membership', step, epoch, worldSize, members, left, joined })}\n`;
}

/** How this member joins: what a tab passes (`runBrowserRank`); a Node member's come from its env. */
export interface ElasticMemberOptions {
  /** The join token (default `WEBSHARD_TOKEN`); a tab's comes from its page's fragment. */
  token?: string;
  /** The name the coordinator shows (default `pid N`). */
  name?: string;
  /** Called once admitted, with the first epoch's rank and world size. */
  admitted?: (rank: number, worldSize: number) => void;
  /**
   * Called with every epoch this member trains in, once the world regrouped (`rejoined` when it
   * was dropped and admitted again as a newcomer: [Note: liveness in an elastic world]).
   */
  changed?: (change: MembershipChange) => void;
  /**
   * diloco: called while this member downloads the world's state after it was admitted, after
   * every chunk and once more when it holds the state ([Note: a diloco join that does not stop
   * the world]).
   */
  joinProgress?: (progress: JoinProgress) => void;
  /**
   * The simulated link between the members (`WEBSHARD_LINK`'s settings or a preset's name, [Note:
   * the link shaper] in collectives); every member gives the same. A Node member takes
   * `WEBSHARD_LINK`, a tab its job's (the coordinator's `WEBSHARD_LINK`). Default: none.
   */
  link?: string;
}

/**
 * One member's run of an elastic job ([Note: elastic training in the trainer]): join, set up,
 * step with a sync point after every step, finish. Resolves when the job's last step is done.
 */
export async function trainElastic(
  config: TrainConfig,
  io: RunIO,
  member: ElasticMemberOptions = {},
): Promise<TrainSummary & { rank?: number }> {
  const tls = config.tls ? await readTlsFiles(config.tls) : null;
  // [Note: a member builds before it joins]: the FMA this member would choose alone.
  const own = await agreeOnFma(config, null);
  const prebuilt = await buildLocal({ ...config, matmulFma: own.matmulFma }, io, false);
  let elastic: ElasticGroup;
  try {
    elastic = await joinElastic({
      url: config.elastic!,
      ...(tls === null ? {} : { tls }),
      ...(config.noListen ? { listen: false } : {}),
      coordinatorTimeoutMs: (config.coordinatorTimeoutSeconds ?? 300) * 1000,
      backend: config.transport === 'ws' ? 'ws' : 'tcp',
      name: member.name ?? `pid ${typeof process === 'undefined' ? '?' : process.pid}`,
      ...(member.token === undefined ? {} : { token: member.token }),
      ...(member.link === undefined ? {} : { link: member.link }),
    });
  } catch (error) {
    disposeLocalBuild(prebuilt);
    throw error;
  }
  member.admitted?.(elastic.membership.rank, elastic.membership.worldSize);
  try {
    const sharded = config.strategy === 'fsdp';
    let run = await setUpMember(config, io, elastic, prebuilt);
    const records: StepRecord[] = [];
    const started = performance.now();
    const progress = createProgress((text) => run.lead && io.stdout(text), false);
    let log =
      run.lead && config.logJsonl !== null
        ? await openLog(config.logJsonl, null, [], { fenced: true })
        : null;
    // The last step in the log: a diloco step's line waits for its outer sync, where this member
    // may have become rank 0 and logged it already (without the sync's fields) with the steps the
    // rank 0 before it did not log.
    let logged = 0;
    const logStep = async (record: StepRecord) => {
      if (log === null || record.step <= logged) return;
      await log.write(logLine({ ...record, seconds: (performance.now() - started) / 1000 }));
      logged = record.step;
    };
    const announce = async (change: MembershipChange, step: number) => {
      if (!run.lead && log !== null) {
        // Rank 0 no more (dropped, and back as a newcomer): the new rank 0 writes the log.
        await log.close();
        log = null;
      }
      run.say(
        `elastic: epoch ${change.epoch}, ${change.worldSize} member(s) [${change.members.join(', ')}]${change.left.length > 0 ? `, left [${change.left.join(', ')}]` : ''}${change.joined.length > 0 ? `, joined [${change.joined.join(', ')}]` : ''}, next step ${step + 1}`,
      );
      if (run.lead && log === null && config.logJsonl !== null) {
        // This member became rank 0: the log goes on from the step the world is at, with the
        // steps this member took that the one before did not log.
        const appended = await appendLog(config.logJsonl);
        log = appended;
        logged = appended.lastStep;
        for (const record of records) await logStep(record);
      }
      await log?.write(membershipLine(change, step));
      member.changed?.(change);
    };
    const outer = run.prepared.outer !== undefined;
    // diloco, not streamed: a newcomer downloads the state in slices while the others train on.
    const sliced = outer && run.prepared.outer!.diloco?.options.streamed === false;
    // Streamed: fragment work every step ([Note: streamed syncs in an elastic world]).
    const streamed = outer && run.prepared.outer!.diloco?.options.streamed === true;
    let download: JoinDownload | null = null;
    // Uploads of slices a test holds for some outer syncs (`WEBSHARD_TRAINER_JOIN_HOLD_SYNCS`).
    let held: { holdSyncs: number; start: () => void }[] = [];
    const releaseUploads = () => {
      for (const upload of held) if (--upload.holdSyncs === 0) upload.start();
      held = held.filter((upload) => upload.holdSyncs > 0);
    };
    const progressOf = (p: JoinProgress) => member.joinProgress?.(p);
    /** After a change: rank 0's step and pending, the state in slices or, in a fresh world, whole. */
    const shareOuter = async (at: number, pending: boolean, newcomer: boolean) => {
      if (!sliced) {
        const started = performance.now();
        const shared = await shareOuterState(run, elastic, at, pending, newcomer);
        // Streamed, a newcomer takes the state whole: a tab's page shows it held.
        if (newcomer) {
          const { bytes } = shared;
          const seconds = (performance.now() - started) / 1000;
          progressOf({ receivedBytes: bytes, totalBytes: bytes, seconds, senders: 1, done: true });
        }
        return shared;
      }
      const needs = newcomer || download !== null;
      const shared = await shareOuterStateInSlices(run, elastic, at, pending, needs, progressOf);
      download = shared.download;
      if (shared.upload?.holdSyncs === 0) shared.upload.start();
      else if (shared.upload !== undefined) held.push({ ...shared.upload });
      if (shared.fresh) {
        const whole = await shareOuterState(run, elastic, at, pending, true, true);
        if (whole.skipped.length > 0) {
          io.stdout(
            `elastic: every member held rank 0's ${whole.skipped.join(', ')} already (digests alike): not sent\n`,
          );
        }
        return whole;
      }
      return shared;
    };
    /** A download whose slices are all in: load, replay, say so. Between syncs only. */
    const landDownload = async () => {
      if (download === null || !(await finishDownload(download))) return;
      const { receivedBytes, senders, started, catchUp } = download;
      const seconds = (performance.now() - started) / 1000;
      io.stdout(
        `elastic: state received, ${receivedBytes} bytes from ${senders} member(s) in ${seconds.toFixed(1)} s, ${catchUp.syncs} outer sync(s) caught up, at step ${step}\n`,
      );
      member.joinProgress?.({
        receivedBytes,
        totalBytes: download.totalBytes,
        seconds,
        senders,
        done: true,
      });
      download = null;
      await digest();
    };
    // diloco: whether this member trained since the last global copy ([Note: diloco members that
    // come and go] in ./elastic-outer.ts).
    let hasDelta = false;
    // A member still downloading holds no global copy yet: it prints one once it lands.
    const digest = async () => {
      if (outer && download === null) {
        io.stdout(`elastic: global digest ${await globalDigest(run)} at step ${step}\n`);
      }
    };
    /**
     * After a change: the strategy moved to the new world and the state shared. A member lost in
     * these collectives too (a tab closed while the world regrouped) only means another change:
     * every op of the regroup is covered, as the step's are ([Note: elastic training in the
     * trainer]).
     */
    const regroup = async (
      first: MembershipChange,
      share: (change: MembershipChange) => Promise<void>,
    ) => {
      await acrossChanges(elastic, 'a regroup', first, (change) => share(change!));
      await announce(elastic.membership, step);
      await digest();
    };
    /**
     * diloco: an outer sync point. The coordinator's sync point comes first, so a member later than
     * `--sync-timeout` is left out of this sync (it joins again as a newcomer, its pseudo-gradient
     * stale); then the outer sync runs over the world that met, again in the next world if a
     * member is lost in it. `joined`: a newcomer just admitted at this point, which runs the outer
     * sync with the others (its weight 0) without meeting the coordinator again. Gives what the
     * sync reported (null: streamed, or nothing averaged), for the step's log line.
     */
    const outerSyncPoint = async (joined: boolean): Promise<OuterSyncReport | null> => {
      // Streamed: a fragment lost in flight since the last point rebuilds the world here.
      let failed = streamed && run.prepared.outer!.diloco!.state === 'failed';
      let changed = joined;
      for (;;) {
        const change = joined ? null : await elastic.sync({ failed });
        joined = false;
        if (change !== null) {
          changed = true;
          await regroup(change, async (now) => {
            const previous = run.prepared.outer!.diloco!;
            await enterEpoch(run, config, elastic);
            run.prepared.outer!.adopt(previous);
            // A member dropped and admitted again takes the world's state; its delta is stale.
            if (now.rejoined === true) hasDelta = false;
            ({ step } = await shareOuter(step, true, now.rejoined === true));
          });
        }
        try {
          await landDownload();
          if (streamed && step < config.steps) {
            faultPoint('fragment');
            await streamPoint(run, changed, hasDelta);
            return null;
          }
          const report = await syncOuter(run, hasDelta, download?.catchUp);
          hasDelta = false;
          await landDownload();
          releaseUploads();
          return report;
        } catch (error) {
          if (!memberLost(elastic, error)) throw error;
          failed = true;
        }
      }
    };
    let step = 0;
    if (sharded) {
      step = run.firstStep;
      await announce(elastic.membership, step);
    } else {
      // The first share is a regroup's too: a member lost in it (frozen while the others wait for
      // its state digests, a tab closed) only means another change, and the share runs again in
      // the next world.
      let pending = false;
      let again = false;
      await regroup(elastic.membership, async () => {
        // A share run again is in a new world: the strategy moves to it first.
        if (again) {
          const previous = run.prepared.outer?.diloco ?? null;
          await enterEpoch(run, config, elastic);
          if (previous !== null) run.prepared.outer!.adopt(previous);
        }
        again = true;
        if (!outer) {
          step = await shareRunState(run, elastic, 0);
          return;
        }
        const shared = await shareOuter(0, false, true);
        step = shared.step;
        pending = shared.pending;
      });
      // Admitted at an outer sync point: it runs that sync with the others, with no delta.
      if (pending) await outerSyncPoint(true);
    }
    while (step < config.steps) {
      let record: StepRecord | null = null;
      // diloco: a member still downloading the state trains nothing; the world's steps go on.
      const training = download === null;
      if (training) {
        try {
          record = await oneStep(run, step);
          const every = config.checkpointEvery;
          if (sharded && every > 0 && record.step % every === 0) {
            await saveCheckpoint(run, record.step, records.concat(record), []);
          }
        } catch (error) {
          // A member died under this step: it runs again once the world is rebuilt.
          if (!memberLost(elastic, error)) throw error;
          io.stdout(`elastic: step ${step + 1} failed, the world regroups: ${failure(error)}\n`);
        }
      } else step += 1;
      if (record !== null) {
        step += 1;
        records.push(record);
        progress.step(record, (performance.now() - started) / 1000);
        io.onStep?.(record);
        // diloco: the line waits for the step's outer sync, if it has one (below).
        if (!outer) {
          // A sharded world restarted from its checkpoint runs steps again: each run is logged.
          await log?.write(logLine(record));
          logged = record.step;
        }
        faultPoint('step');
      }
      const signal = io.stop?.signal ?? null;
      if (signal !== null) {
        // This member leaves (the others drop it at their next sync point); the job goes on.
        await log?.close();
        throw new InterruptedError(signal, {
          step,
          steps: config.steps,
          checkpoint: null,
          lead: run.lead,
        });
      }
      if (outer) {
        if (training) hasDelta = true;
        // Members meet only at outer syncs: between them there is no sync point. A step's line
        // holds its sync (its bytes, its time in the step's), as without --elastic.
        let report: OuterSyncReport | null = null;
        const syncStarted = performance.now();
        if (run.prepared.outer!.due(step - 1)) report = await outerSyncPoint(false);
        else if (streamed) {
          const lost = await streamBetween(run, elastic);
          if (lost !== null) {
            io.stdout(
              `elastic: fragment ${lost} lost in flight at step ${step}: nothing of it applied, the world regroups at its next sync point\n`,
            );
          }
        }
        if (record !== null) await logStep(withOuterSync(record, report, syncStarted));
        continue;
      }
      const change = await elastic.sync({ failed: record === null });
      if (change !== null) {
        await regroup(change, async () => {
          if (sharded) {
            run = await restartSharded(config, io, elastic, run);
            step = run.firstStep;
          } else {
            await enterEpoch(run, config, elastic);
            step = await shareRunState(run, elastic, step);
          }
        });
      }
    }
    progress.done();
    // diloco: the global copy every member ends with (a newcomer's included), for the tests.
    await digest();
    await log?.close();
    if (records.length === 0) {
      // Admitted at the job's last sync point: the state is the final one, nothing is left to train.
      run.say('elastic: admitted after the last step; nothing left to train');
      return {
        model: run.model,
        backend: run.backend,
        records,
        evals: [],
        sample: '',
        rank: elastic.group.rank,
      };
    }
    const summary = await finishRun(run, { records, evals: [], started, interrupted: null });
    return { ...summary, rank: elastic.group.rank };
  } finally {
    await elastic.close();
  }
}
