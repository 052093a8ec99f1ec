import type { ProcessGroup } from '@webshard/collectives';
import { DiLoCo, DilocoStateError, fragmentDue } from '@webshard/diloco';
import { outerStateStore } from '#platform';
import type { TrainConfig } from '../config.js';
import { turnsInBackward } from './backward-turns.js';
import type { AnyOptimizer, OuterSyncReport, PreparedModel } from './prepared-model.js';

/**
 * [Note: the diloco strategy]
 * Each rank trains its own replica on its own share of every batch (the deterministic batches
 * split over ranks as under ddp, but nothing is reduced in backward) with the run's AdamW; every
 * `--inner-steps` steps, and after the last step, `DiLoCo` (@webshard/diloco) averages the
 * pseudo-gradients over the group and takes the outer Nesterov step, so the ranks hold the same
 * parameters again. `start` broadcasts rank 0's parameters once the optimizer exists, except
 * under `--elastic`, where members come and go at outer syncs and a member takes the world's state
 * from rank 0 when admitted ([Note: diloco members that come and go] in run/elastic-outer.ts). Steps
 * between syncs are quiet (`quietStep`): on a link of 40 ms, the loop's own all-gather a step (the
 * per-rank numbers of the step line and the agreed stop) costs more than the step's compute, so
 * only the sync steps run it. The loss logged between syncs is rank 0's own, the mean over ranks
 * at a sync, taken with that all-gather after the update and settled a step later (`lossMeanInLine`,
 * [Note: a step line a step late] in run/loop.ts): the inner steps are each rank's own, so a
 * non-finite loss stops the rank that sees it, at any step, and its peers fail with its error. A
 * signal stops the ranks a step after the next sync. Held-out evaluations
 * between syncs run on each rank's own parameters (rank 0's loss is printed); the saved model and
 * samples come after the final sync. Checkpoints and 16-bit precision are refused at the flags
 * (cli/options.ts). With `--outer-fragments` or `--outer-overlap` the syncs stream ([Note:
 * streamed fragments] in @webshard/diloco): a fragment lands every H / F steps, and the loop's
 * collectives run only at the steps where fragment 0 lands (H + tau, 2H + tau, ...) and the last:
 * a collective of the group waits behind the fragment on the wire, so at any other step they
 * would bring back the wait the overlap hides. The last step lands the fragment in flight and
 * syncs every fragment at once, so every rank saves the global parameters. Streamed under
 * `--elastic`, the elastic loop runs each step's fragment work and the members meet where a
 * fragment is issued ([Note: streamed syncs in an elastic world] in run/elastic-stream.ts). A rank
 * whose communication runs on its own thread gives the event loop turns in backward, so what moves
 * in the background (a join's upload, a fragment) moves during the inner steps ([Note: turns of
 * the event loop in backward] in ./backward-turns.ts); `release` removes them.
 */
export function prepareDiloco(
  base: Omit<PreparedModel, 'step' | 'start' | 'afterStep'>,
  config: TrainConfig,
  group: ProcessGroup,
): PreparedModel {
  let diloco: DiLoCo | null = null;
  const elastic = (config.elastic ?? null) !== null;
  const streamed = config.outerFragments > 1 || config.outerOverlap > 0;
  const last = (step: number) => step + 1 === config.steps;
  const due = (step: number) => (step + 1) % config.innerSteps === 0 || last(step);
  // Streamed under --elastic, the members meet where a fragment is issued, and after the last step
  // ([Note: streamed syncs in an elastic world] in run/elastic-stream.ts).
  const issued = (step: number) =>
    fragmentDue(step + 1, config.innerSteps, config.outerFragments) !== null || last(step);
  // Streamed, the loop's collectives run where fragment 0 lands: the wire is free after it
  // ([Note: the diloco strategy]).
  const loud = (step: number) =>
    last(step) ||
    (step + 1 > config.outerOverlap && (step + 1 - config.outerOverlap) % config.innerSteps === 0);
  const turns =
    'movesBytesOnWorker' in group.transport
      ? null
      : turnsInBackward(base.params, undefined, undefined, () => group.progress());
  return {
    ...base,
    release: () => turns?.remove(),
    // The loss's mean over ranks comes with the step line's all-gather, after the update.
    step: {},
    lossMeanInLine: true,
    async start(optimizer: AnyOptimizer) {
      // A tab keeps the global copy and momentum out of its memory ([Note: the outer state in a
      // store] in @webshard/diloco); a Node member holds them (null).
      const store = streamed ? null : await outerStateStore();
      diloco = await DiLoCo.create(base.params, optimizer, {
        ...(store === null ? {} : { outerState: store }),
        group,
        innerSteps: config.innerSteps,
        outerLr: config.outerLr,
        outerMomentum: config.outerMomentum,
        compression: config.outerCompression,
        ...(config.outerCompression === 'topk'
          ? { density: config.outerDensity, levels: config.outerLevels }
          : {}),
        ...(config.outerErrorDecay === null ? {} : { errorDecay: config.outerErrorDecay }),
        ...(streamed
          ? {
              fragments: config.outerFragments,
              overlap: config.outerOverlap,
              merge: config.outerMerge,
              ...(config.outerMerge === 'mix' ? { mixing: config.outerMixing } : {}),
            }
          : {}),
        // An elastic member takes the world's state from rank 0 instead (run/elastic-outer.ts).
        broadcast: !elastic,
      });
    },
    ...(elastic
      ? {
          outer: {
            get diloco() {
              return diloco;
            },
            due: streamed ? issued : due,
            adopt(previous: DiLoCo) {
              previous.regroup(group);
              diloco = previous;
            },
          },
        }
      : {}),
    // Only the steps that end with a sync communicate: [Note: the diloco strategy].
    // Under --elastic every step is quiet: the elastic loop runs the syncs and their collectives.
    quietStep: (step: number) => elastic || !(streamed ? loud(step) : due(step)),
    async afterStep(step: number): Promise<OuterSyncReport | null> {
      if (elastic) return null;
      if (diloco === null) {
        throw new DilocoStateError(
          { op: 'afterStep', rank: group.rank },
          'not started',
          'the diloco strategy took a step before start()',
        );
      }
      const before = diloco.bytesSent;
      // The last step ends with every parameter synced, so the saved model is the global one
      // (streamed: every fragment, the one issued with this step not sent twice).
      const { synced, syncMs, waitMs } = await diloco.afterInnerStep({ last: last(step) });
      if (!synced) return null;
      return { outerStep: diloco.outerStep, bytesSent: diloco.bytesSent - before, syncMs, waitMs };
    },
  };
}
