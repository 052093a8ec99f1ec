import {
  abandonCheckpoint,
  beginCheckpoint,
  faultPoint,
  finishCheckpoint,
  joinPath,
  openLog,
  stepDirName,
} from '#platform';
import type { RunState } from '../checkpoint/run-checkpoint.js';
import { InterruptedError, NonFiniteLossError } from '../errors.js';
import { agreedStop, type StopSignal, stopNumber, strongestStop } from '../interrupt.js';
import { hostMemoryFields } from '../host-memory.js';
import { logLine } from '../io/log-line.js';
import { createProgress, type StepRecord } from '../progress.js';
import { outerSyncFields } from '../strategy/prepared-model.js';
import type { EvalPoint } from '../report/html-report.js';
import { accumulatedStep, type MixedStepResult } from '../train-step.js';
import { capturedLoopStep } from './captured-loop-step.js';
import { heldOutLoss, shortSample } from './held-out.js';
import { microBatchLosses } from './micro-batches.js';
import { type GatheredFields, issueRankFields } from './rank-fields.js';
import { learningRate } from './schedule.js';
import type { Run } from './set-up.js';

/** What the loop did: its steps and evaluations, when it started, and the signal that stopped it. */
export interface LoopResult {
  records: StepRecord[];
  evals: EvalPoint[];
  /** `performance.now()` at the first step. */
  started: number;
  /** Set when a signal stopped the run ([Note: interrupts] in interrupt.ts); the finish is skipped. */
  interrupted: InterruptedError | null;
}

/**
 * The steps, from `run.firstStep` to `--steps`: deterministic batches split in micro-batches,
 * AdamW with the schedule and clipping, the progress bar and the JSONL log, evaluations and
 * checkpoints every so many steps. It ends at the last step, at `--max-seconds`, or at a signal
 * the ranks agree on (then with a checkpoint, if the run keeps them).
 */
export async function runLoop(run: Run): Promise<LoopResult> {
  const { config, io, group, firstStep } = run;
  // Outputs that grow as the run goes: the JSONL log (a live log, not an atomic file; a resumed
  // run keeps its lines up to the resumed step: [Note: the log of a resumed run]).
  const log =
    config.logJsonl !== null && run.lead
      ? await openLog(config.logJsonl, run.resumed?.state.step ?? null, run.earlier.records)
      : null;
  if (log !== null && log.dropped + log.restored > 0) {
    run.say(
      `log: ${config.logJsonl} keeps its ${log.kept} lines up to step ${firstStep}${log.restored > 0 ? ` (${log.restored} restored from the checkpoint)` : ''}; dropped ${log.dropped} past it (from a run stopped after its last checkpoint)`,
    );
  }
  const progress = createProgress(run.lead ? io.stdout : () => {}, io.isTTY, io.terminal);

  const records: StepRecord[] = [];
  const evals: EvalPoint[] = [];
  const now = io.now ?? (() => performance.now());
  const started = now();
  const elapsedNow = () => (now() - started) / 1000;
  let interrupted: InterruptedError | null = null;
  const interrupt = async (signal: StopSignal, step: number) => {
    let checkpoint: string | null = null;
    if (config.checkpointDir !== null && step > firstStep) {
      if (step % config.checkpointEvery !== 0) await saveCheckpoint(run, step, records, evals);
      checkpoint = joinPath(config.checkpointDir, stepDirName(step));
    }
    return new InterruptedError(signal, { step, steps: config.steps, checkpoint, lead: run.lead });
  };
  // A signal before the first step (during the probe, say): a single rank stops now; ranks of a
  // job agree after their first step.
  const early = group === null || group.size === 1 ? (io.stop?.signal ?? null) : null;
  if (early !== null) interrupted = await interrupt(early, firstStep);
  // The line of a step whose per-rank fields are still on the wire ([Note: a step line a step
  // late]): settled after the next step, or at once where the loop needs them now.
  let pending: PendingLine | null = null;
  const emit = async (record: StepRecord) => {
    records.push(record);
    progress.step(record, record.seconds ?? 0);
    io.onStep?.(record);
    const news = run.prepared.news?.();
    if (news) progress.line(news);
    if (log !== null) await log.write(logLine(record));
  };
  const settlePending = async (): Promise<GatheredFields | null> => {
    if (pending === null) return null;
    const line = pending;
    pending = null;
    const gathered = await settleLine(run, line);
    await emit(line.record);
    return gathered;
  };
  // The time budget: a rank alone reads its own clock; the ranks of a job read rank 0's, from a
  // step line's all-gather, so that all stop after the same step (each rank's clock alone let one
  // stop while the others went on into a collective it never joined).
  const multi = group !== null && group.size > 1;
  const spent = (seconds: number, step: number) =>
    config.maxSeconds > 0 && seconds >= config.maxSeconds && step < config.steps;
  try {
    for (let step = firstStep; step < config.steps && interrupted === null; step++) {
      const { record, gathered } = await stepAndLine(run, step, elapsedNow);
      const elapsed = record.seconds!;
      // The step before's numbers, a step late: their all-gather ran while this step computed.
      const before = await settlePending();
      let stop = before?.stop ?? null;
      const evaluates =
        config.evalEvery > 0 && record.step % config.evalEvery === 0 && record.step < config.steps;
      const checkpoints = config.checkpointEvery > 0 && record.step % config.checkpointEvery === 0;
      let budgetSpent = multi
        ? before !== null && spent(before.leadSeconds, record.step)
        : spent(elapsed, record.step);
      if (gathered === null) {
        await emit(record);
      } else {
        pending = { record, gathered };
        // Where the loop needs this step's line now: an evaluation or a checkpoint after it, a
        // stop, the last step.
        if (
          evaluates ||
          checkpoints ||
          budgetSpent ||
          stop !== null ||
          record.step >= config.steps
        ) {
          const line = (await settlePending())!;
          stop = strongestOf(stop, line.stop);
          budgetSpent ||= spent(line.leadSeconds, record.step);
        }
      }
      if (evaluates) {
        const point = {
          step: record.step,
          loss: await heldOutLoss(run),
          sample: await shortSample(run, 60),
        };
        evals.push(point);
        progress.line(
          `eval after step ${point.step}: held-out loss ${point.loss.toFixed(4)}${point.sample ? ` | ${JSON.stringify(point.sample)}` : ''}`,
        );
      }
      if (checkpoints) await saveCheckpoint(run, record.step, records, evals);
      faultPoint('step');
      // A quiet step (diloco between syncs) leaves the agreement to the next step that is not;
      // one that gathered its per-rank fields agreed in the same all-gather, acted on a step later
      // (or now, with its line settled above).
      if (
        stop === null &&
        gathered === null &&
        !(run.prepared.quietStep?.(record.step - 1) ?? false)
      ) {
        stop = await agreedStop(io.stop, group);
      }
      if (stop !== null) {
        await settlePending();
        interrupted = await interrupt(stop, record.step);
        break;
      }
      if (budgetSpent) {
        progress.line(
          `stopped after step ${record.step} of ${config.steps}: the ${config.maxSeconds} s budget is spent`,
        );
        break;
      }
    }
    await settlePending();
  } catch (error) {
    // A step that failed leaves the line before it without its per-rank fields rather than wait
    // on peers that may be gone.
    const line = pending as PendingLine | null;
    pending = null;
    if (line !== null) {
      line.gathered.catch(() => {});
      await emit(line.record).catch(() => {});
    }
    throw error;
  } finally {
    progress.done();
    await log?.close();
  }
  return { records, evals, started, interrupted };
}

/** The step as the strategy runs it, eagerly: its micro-batches, clip, update. */
async function eagerStep(run: Run, step: number): Promise<MixedStepResult> {
  const { config, group, prepared, optimizer } = run;
  const microLosses = microBatchLosses(run.model, prepared, config, run.data, step, group);
  // A quiet step runs no collective of the loop's own: the loss is this rank's, the records its own.
  const quiet = prepared.quietStep?.(step) ?? false;
  const { meanOverRanks, ...stepOptions } = prepared.step;
  return accumulatedStep(prepared.params, optimizer, microLosses, {
    clip: config.gradClip === 0 ? Number.POSITIVE_INFINITY : config.gradClip,
    ...stepOptions,
    ...(quiet || meanOverRanks === undefined ? {} : { meanOverRanks }),
    ...(prepared.mixed === undefined ? {} : { mixed: prepared.mixed }),
    check: (loss) => {
      if (!Number.isFinite(loss)) throw new NonFiniteLossError(step + 1, loss);
    },
  });
}

/** One optimizer step (index `step`, from 0) and its record: loss, norm, time, peak memory. */
export async function oneStep(run: Run, step: number): Promise<StepRecord> {
  const { record, gathered } = await stepAndLine(run, step);
  if (gathered !== null) await settleLine(run, { record, gathered });
  return record;
}

/** A step's record and its per-rank fields' all-gather, still on the wire. */
interface PendingLine {
  record: StepRecord;
  gathered: Promise<GatheredFields>;
}

/**
 * [Note: a step line a step late]
 * After a step that is not quiet, the ranks gather their per-rank numbers for its line (device and
 * host peaks, step time, loss), rank 0's clock and the stop request in one all-gather
 * (`issueRankFields`), which costs one latency of the group: 40 ms on broadband-20, twice a DiLoCo
 * inner step of the default GPT. The loop issues it after the step and settles it after the next
 * one, so it crosses the link while that step computes: the step's line is written, shown and
 * handed to `onStep` then, and the stop it carries, or rank 0's clock past `--max-seconds`, is
 * acted on after that next step, on every rank alike (each rank's own clock had let one rank stop
 * while the others went on into a collective it never joined). Where the loop needs the line at
 * once it settles it at once: before an evaluation or a checkpoint (whose history holds it), at a
 * stop, and after the last step. A step that throws leaves the line before it without its
 * per-rank fields, not waiting on peers that may be gone. `lossMeanInLine` strategies (diloco)
 * take the step's logged loss from the same all-gather.
 */
async function settleLine(run: Run, line: PendingLine): Promise<GatheredFields> {
  const gathered = await line.gathered;
  Object.assign(line.record, gathered.fields);
  if (run.prepared.lossMeanInLine) line.record.loss = gathered.meanLoss;
  return gathered;
}

/** The stronger of two stop requests (SIGTERM over SIGINT), or the one given. */
function strongestOf(a: StopSignal | null, b: StopSignal | null): StopSignal | null {
  return strongestStop([stopNumber({ signal: a }), stopNumber({ signal: b })]);
}

/**
 * `oneStep` without waiting for its per-rank fields: on a step that gathers them, the all-gather
 * (issued, every rank at the same place among its collectives) that brings them and the stop
 * every rank acts on ([Note: a step line a step late]); null where nothing is gathered.
 */
async function stepAndLine(
  run: Run,
  step: number,
  clock?: () => number,
): Promise<{ record: StepRecord; gathered: Promise<GatheredFields> | null }> {
  const { config, group, prepared, optimizer, backend } = run;
  const lr =
    config.lrSchedule === 'cosine'
      ? learningRate(step, config.steps, config.lr, config.warmupSteps)
      : config.lr;
  for (const paramGroup of optimizer.paramGroups) paramGroup.lr = lr;
  const start = performance.now();
  const result = (await capturedLoopStep(run, step)) ?? (await eagerStep(run, step));
  // The strategy's part after the optimizer step (diloco's outer sync), inside the step's time.
  const outer = (await prepared.afterStep?.(step)) ?? null;
  const quiet = prepared.quietStep?.(step) ?? false;
  // Under --elastic no collective of the loop's own follows the update: a member lost there would
  // fail a step whose parameters had moved, and the step, run again, would move them twice. The
  // per-rank fields are left out ([Note: elastic training in the trainer]).
  const solo = quiet || (config.elastic ?? null) !== null;
  const ms = performance.now() - start;
  const tokensPerStep = config.batchSize * (config.model === 'gpt' ? config.blockSize : 1);
  const peak = backend.memoryStats().peakAllocated;
  // The line's `seconds`: the loop's clock, the same number in rank 0's all-gather for the budget.
  const seconds = clock?.() ?? 0;
  const issued =
    group !== null && group.size > 1 && !solo
      ? await issueRankFields(
          group,
          { peakAllocated: peak, tokensPerStep, ms, loss: result.loss, seconds },
          run.io.stop,
        )
      : null;
  const record: StepRecord = {
    step: step + 1,
    steps: config.steps,
    loss: result.loss,
    gradNorm: result.gradNorm,
    lr,
    ms,
    tokensPerSecond: (tokensPerStep * 1000) / ms,
    ...(outer === null ? {} : outerSyncFields(outer)),
    peakDeviceBytes: peak,
    ...externalPeak(backend.memoryStats().peakExternalBytes),
    ...(issued === null ? await hostMemoryFields() : {}),
    ...(clock === undefined ? {} : { seconds }),
  };
  return { record, gathered: issued?.gathered ?? null };
}

/** A checkpoint after `step` into `--checkpoint-dir`, with the run's history so far. */
export async function saveCheckpoint(
  run: Run,
  step: number,
  records: readonly StepRecord[],
  evals: readonly EvalPoint[],
): Promise<void> {
  const { config, prepared, earlier } = run;
  const root = config.checkpointDir!;
  const state: RunState = {
    runId: run.runId,
    step,
    strategy: config.strategy,
    worldSize: config.worldSize,
    scaler: prepared.mixed?.scaler.stateDict() ?? null,
    history: { records: [...earlier.records, ...records], evals: [...earlier.evals, ...evals] },
  };
  try {
    const partial = await beginCheckpoint(root, step, run.lead);
    // Rank 0 empties and makes the step's folder before any rank writes into it: without this
    // barrier a rank that began first (an elastic world re-saving a step) saw its folder removed
    // under it (`ENOENT`) or its shard deleted.
    if (run.group !== null && run.group.size > 1) await run.group.barrier().wait();
    await prepared.saveCheckpoint(partial, run.optimizer, state);
    if (run.lead) await finishCheckpoint(root, partial, state, config.overwriteCheckpoints);
  } catch (error) {
    // No `.step-N.partial` outlives a failed checkpoint, and `latest` still names the previous
    // one ([Note: a checkpoint directory belongs to a run]): rank 0, which made the folder,
    // removes it. It aborts the world first, so that a rank still writing there, which fails on
    // the missing folder, fails as a consequence of rank 0's error, which is the one reported.
    if (run.lead) {
      if (run.group !== null && run.group.size > 1 && run.group.state === 'ready') {
        run.group.abort(`rank 0 could not save step ${step}: ${(error as Error).message}`);
      }
      await abandonCheckpoint(root, step);
    }
    throw error;
  }
}

/** `peakExternalBytes` where the backend counts memory outside its allocator. */
function externalPeak(bytes: number | undefined): { peakExternalBytes?: number } {
  return bytes === undefined ? {} : { peakExternalBytes: bytes };
}
