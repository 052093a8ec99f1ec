import { averageScalar, CollectiveError, type ElasticGroup } from '@webshard/collectives';
import type { DiLoCo } from '@webshard/diloco';
import type { Run } from './set-up.js';

/*
 * [Note: streamed syncs in an elastic world]
 * `--elastic` with `--outer-fragments` / `--outer-overlap` ([Note: streamed fragments] in
 * @webshard/diloco). Where the members meet: at every step where a fragment is issued (H / F
 * steps apart) and after the last step, as torchft's streaming DiLoCo (`local_sgd.py`) starts a
 * quorum at each fragment's `prepare_sync`, `fragment_sync_delay` steps before its
 * `perform_sync`. A newcomer is admitted there, so it takes part in a fragment's average from its
 * issue and never in one issued before it came; the members meet before the step's fragment work
 * (`streamPoint`: land the fragment due, issue the next), so the fragment issued at a meeting runs
 * over the world that met. With tau < H / F nothing is in flight at a meeting (torchft's case:
 * its delay is below H / F); with tau = H / F the fragment due to land there is in flight, and a
 * change at that meeting drops it ([Note: streamed fragments]: its pseudo-gradient stays in the
 * local parameters and goes out with its next turn).
 *
 * Between meetings each step runs its fragment work (`streamBetween`) and a member lost there
 * fails the landing of the fragment in flight on the survivors: at once when it died (its links
 * close), after the coordinator's member timeout when it froze ([Note: liveness in an elastic
 * world]: the coordinator drops it and tells the others to abort their group). Nothing of that
 * fragment is applied and DiLoCo is `failed`; the member says so, trains on alone without fragment
 * work to the next meeting (at most H / F steps) and reports the failure there, which rebuilds the
 * world even if nobody left. Meeting at the schedule's next point rather than at once keeps every
 * member's count of sync points the same: a survivor whose landing succeeded (its part of the
 * average came in before the loss) and one whose landing failed meet at the same step.
 *
 * After a change, DiLoCo regroups (the fragment in flight is dropped on every member, settled or
 * not) and rank 0 broadcasts its global copy, outer momentum and step counts (`shareOuterState`):
 * a newcomer (a new process, or a member dropped and admitted again, whose pseudo-gradient is
 * stale) takes them with its parameters set to the global copy and rank 0's AdamW, the whole
 * model at once as torchft's healing replica does (the sliced download of [Note: a diloco join
 * that does not stop the world] replays the syncs a newcomer missed while it downloads, with
 * `outerSync({ missed })` and `applyAverage`, which DiLoCo refuses for streamed syncs: a
 * fragment's landing mixes local parameters the newcomer does not have yet); every survivor
 * takes them too but keeps its own parameters, residuals and AdamW.
 * That is the commit torchft's `should_commit` makes: a survivor whose landing succeeded and one
 * whose landing failed may hold different global copies; after it every member holds rank 0's bit
 * for bit (the digest every member prints after a change). The inner-step count is the world's
 * step, so the fragment schedule stays the same on every member. The first fragment issued after
 * a change weighs a member that trained since it took the state by size / contributors (`topk`:
 * 1) and one that did not (the newcomer) by 0, as `syncOuter`: the average is the contributors',
 * as torchft divides by its participants, not its healing replicas. The last step syncs every
 * fragment at once (`syncOuter`), so every member ends with the same global copy.
 *
 * Where this differs from torchft: a landing that failed applies nothing, as there, but torchft
 * (`should_commit` said no) leaves that fragment's parameters set back to its global copy,
 * losing the steps since; here a survivor keeps its local parameters, so the lost fragment's
 * pseudo-gradient goes out with that fragment's next turn ([Note: streamed fragments]). And the
 * meeting is a wait at the coordinator, where torchft's quorum runs beside the steps: members
 * whose steps take the same time lose little there (one round trip every H / F steps).
 */

function dilocoOf(run: Run): DiLoCo {
  const diloco = run.prepared.outer?.diloco ?? null;
  if (diloco === null) throw new Error('the diloco strategy is not started');
  return diloco;
}

/**
 * Between meetings: this step's fragment work. Returns the fragment lost in flight when its landing
 * failed because a member was lost, else null; a member already failed does nothing until the next
 * meeting ([Note: streamed syncs in an elastic world]).
 */
export async function streamBetween(run: Run, elastic: ElasticGroup): Promise<number | null> {
  const diloco = dilocoOf(run);
  if (diloco.state === 'failed') return null;
  const inFlight = diloco.fragmentInFlight;
  try {
    await diloco.afterInnerStep();
    return null;
  } catch (error) {
    if (elastic.group.state === 'ready' && !CollectiveError.isInstance(error)) throw error;
    // Between meetings only a landing communicates: a fragment was in flight.
    return inFlight;
  }
}

/**
 * At a meeting, after the coordinator: this step's fragment work over the world that met. `weigh`
 * after a change: the fragment issued now is the contributors' average, `hasDelta` saying whether
 * this member trained since it took the state ([Note: streamed syncs in an elastic world]).
 */
export async function streamPoint(run: Run, weigh: boolean, hasDelta: boolean): Promise<void> {
  const diloco = dilocoOf(run);
  if (!weigh) {
    await diloco.afterInnerStep();
    return;
  }
  const share = await averageScalar(diloco.group, hasDelta ? 1 : 0);
  const contributor = diloco.options.compression === 'topk' || share === 0 ? 1 : 1 / share;
  await diloco.afterInnerStep({ weight: hasDelta || share === 0 ? contributor : 0 });
}
