import type { ProcessGroup } from '@webshard/collectives';
import {
  AdamW,
  type Backend,
  createBackend,
  createCpuBackend,
  type Tensor,
} from '@webshard/tensor-core';
import { encodeSafetensors } from '@webshard/tensor-core/io';
import {
  beginCheckpoint,
  checkFiles,
  DEFAULT_CORPUS_PATH,
  faultPoint,
  finishCheckpoint,
  freeHostMemory,
  joinPath,
  loadDataset,
  openLog,
  readRunState,
  resolveResume,
  stepDirName,
  writeFileAtomically,
} from '#platform';
import type { RunState } from './checkpoint/run-checkpoint.js';
import { newRunId } from './checkpoint/run-id.js';
import { buildModel, loadInitialWeights } from './cli/build-model.js';
import { checkMemory } from './cli/memory-estimate.js';
import type { TrainConfig } from './cli/options.js';
import type { Dataset, TokenizerName } from './data/dataset.js';
import { rankMicroBatches } from './data/global-batch.js';
import { InterruptedError, NonFiniteLossError, UsageError } from './errors.js';
import { evaluate, regressionTensors, tokenTensors } from './evaluate.js';
import { agreedStop, type StopSignal } from './interrupt.js';
import { GPT, type GPTConfig } from './models/gpt.js';
import type { MLP } from './models/mlp.js';
import { createProgress, formatBytes, type ProgressTerminal, type StepRecord } from './progress.js';
import { hostMemoryFields } from './host-memory.js';
import { gatherPerRank } from './ranks/gather.js';
import { checkSameBackend } from './ranks/job-backend.js';
import { type EvalPoint, renderReport } from './report/html-report.js';
import { sample } from './sample.js';
import { type PreparedModel, prepareModel } from './strategy/prepare.js';
import { logLine } from './io/log-line.js';
import { accumulatedStep } from './train-step.js';

/** The model `pnpm train` trains (the CLI's defaults): nanoGPT's shape, small enough for 2 cores. */
export const DEFAULT_MODEL: Omit<GPTConfig, 'vocabSize'> = {
  blockSize: 32,
  nLayer: 2,
  nHead: 4,
  nEmbd: 64,
  dropout: 0,
  bias: true,
};

/** Where a run writes: stdout (progress, results) and whether it is a terminal. */
export interface RunIO {
  stdout(text: string): void;
  isTTY: boolean;
  /** Choose the backend (the CLI's `auto` measures both: [Note: the trainer's default backend]). */
  createBackend?: (config: TrainConfig, vocabSize: number) => Promise<Backend>;
  /**
   * The data set of `path` (default: read the file). A browser rank passes the bytes its page
   * fetched from the Node process that serves it (see [Note: the trainer's platform module]).
   */
  loadData?: (path: string, blockSize: number, tokenizer: TokenizerName) => Promise<Dataset>;
  /** Read after each step: a signal asked the run to stop ([Note: interrupts] in interrupt.ts). */
  stop?: { readonly signal: StopSignal | null };
  /** The terminal's width (and its resizes) when `isTTY`: the bar fits it. */
  terminal?: ProgressTerminal;
}

/** What a finished run did. */
export interface TrainSummary {
  model: GPT | MLP;
  backend: Backend;
  records: StepRecord[];
  evals: EvalPoint[];
  /** The last sample ('' for none). */
  sample: string;
}

/** nanoGPT's schedule: linear warm-up, then cosine decay to `lr / 10` at the last step. */
export function learningRate(step: number, steps: number, lr: number, warmup: number): number {
  const minLr = lr / 10;
  if (step < warmup) return (lr * (step + 1)) / (warmup + 1);
  const progress = steps <= warmup ? 1 : (step - warmup) / Math.max(1, steps - 1 - warmup);
  return minLr + 0.5 * (1 + Math.cos(Math.PI * Math.min(1, progress))) * (lr - minLr);
}

/**
 * One training run as nanoGPT's `train.py` reads: check the inputs and outputs, load the data,
 * build and initialize the model, then step: deterministic batches split in micro-batches, AdamW
 * with nanoGPT's decay groups, clipping, the schedule; evaluate on the held-out tenth, sample,
 * save. Every check that can fail because of the input runs before the first step (see
 * [Note: checks before training]).
 *
 * The run is one rank's: with a `group` (ddp, fsdp) this rank takes its share of every batch
 * (`rankMicroBatches`), the model is prepared by the strategy (see [Note: where the strategies
 * go]), and only rank 0 prints and writes files; every rank evaluates and samples with it (FSDP
 * needs every rank for a forward).
 */
export async function train(
  config: TrainConfig,
  io: RunIO,
  group: ProcessGroup | null = null,
): Promise<TrainSummary> {
  const lead = group === null || group.rank === 0;
  const say = (line: string) => {
    if (lead) io.stdout(`${line}\n`);
  };

  // Inputs and outputs: readable files in, writable paths out, before anything is read or written.
  await checkFiles(config);
  const dataPath = config.model === 'gpt' ? (config.data ?? DEFAULT_CORPUS_PATH) : null;

  // Data: token windows of a file, or the MLP's synthetic stream.
  const data: Dataset | null =
    dataPath === null
      ? null
      : await (io.loadData ?? loadDataset)(dataPath, config.blockSize, config.tokenizer);
  let vocabSize = data?.vocabSize ?? 0;
  if (config.vocabSize !== null) {
    if (config.vocabSize < vocabSize) {
      throw new UsageError(
        `--vocab-size ${config.vocabSize} is smaller than the data's ${vocabSize} tokens`,
        { option: '--vocab-size' },
      );
    }
    vocabSize = config.vocabSize;
  }
  if (data !== null) {
    const count = data.train.length + data.validation.length;
    say(`data: ${dataPath} (${count} ${data.kind}, vocabulary ${vocabSize})`);
  }

  // Memory: refuse a run whose estimate passes the device limit or the host's free memory.
  checkMemory(config, vocabSize, freeHostMemory());

  // Backend and model: seeded nanoGPT init, or --init's weights by PyTorch names.
  const backend = io.createBackend
    ? await io.createBackend(config, vocabSize)
    : await createBackend({
        kind: config.backend,
        ...(config.memoryLimit === null ? {} : { memoryLimit: config.memoryLimit }),
      });
  if (group !== null && group.size > 1) {
    await checkSameBackend(group, backend);
    say(`backend: ${backend.kind} on all ${group.size} ranks (${backend.description})`);
  } else {
    say(`backend: ${backend.kind} (${backend.description})`);
  }
  // Offload, and fsdp with --move-params-to-cpu, keep the model on the host (a CPU backend of its
  // own) and compute on `backend`.
  const onHost = config.strategy === 'offload' || config.moveParamsToCpu;
  const modelBackend = onHost ? createCpuBackend() : backend;
  const model = buildModel(config, vocabSize, modelBackend);
  if (config.init !== null) await loadInitialWeights(model, config.init);
  // Resuming: where the run was, and (but under fsdp, whose shards load after wrapping) its weights.
  const resumeDir = config.resume === null ? null : await resolveResume(config.resume);
  const resumed = resumeDir === null ? null : await readRunState(resumeDir, config);
  if (resumeDir !== null && config.strategy !== 'fsdp') {
    await loadInitialWeights(model, joinPath(resumeDir, 'model.safetensors'), '--resume');
  }
  say(`model: ${config.model}, ${model.parameters().reduce((n, p) => n + p.size, 0)} parameters`);
  if (group !== null) {
    // The transport the group really runs on (`shm+tcp` for a thread rank of a job of several
    // nodes, `shm` for one of one node), not the `--transport` flag's.
    say(`strategy: ${config.strategy} on ${group.size} rank(s) over ${group.transport.kind}`);
  }

  // The strategy's model, and AdamW on what it steps (f32: masters in 16 bits, shards in fsdp).
  const prepared: PreparedModel = prepareModel(model, config, group, backend);
  const { params, mixed } = prepared;
  const optimizer = new AdamW(prepared.groups, {
    lr: config.lr,
    betas: [config.beta1, config.beta2],
    eps: config.eps,
  });
  const clip = config.gradClip === 0 ? Number.POSITIVE_INFINITY : config.gradClip;
  if (resumeDir !== null && resumed !== null) {
    await prepared.loadCheckpoint(resumeDir, optimizer);
    if (resumed.scaler !== null) mixed?.scaler.loadStateDict(resumed.scaler);
    say(`resumed: ${resumeDir} (step ${resumed.step})`);
  }
  const firstStep = resumed?.step ?? 0;
  // A resumed run keeps its id and the steps before its checkpoint (for the report).
  const runId = resumed?.runId ?? newRunId();
  const earlier = {
    records: resumed?.history.records.filter((r) => r.step <= firstStep) ?? [],
    evals: resumed?.history.evals.filter((e) => e.step <= firstStep) ?? [],
  };
  const saveCheckpoint = async (step: number) => {
    const root = config.checkpointDir!;
    const state: RunState = {
      runId,
      step,
      strategy: config.strategy,
      worldSize: config.worldSize,
      scaler: mixed?.scaler.stateDict() ?? null,
      history: { records: [...earlier.records, ...records], evals: [...earlier.evals, ...evals] },
    };
    const partial = await beginCheckpoint(root, step, lead);
    await prepared.saveCheckpoint(partial, optimizer, state);
    if (lead) await finishCheckpoint(root, partial, state, config.overwriteCheckpoints);
  };

  // Outputs that grow as the run goes: the JSONL log (a live log, not an atomic file; a resumed
  // run keeps its lines up to the resumed step: [Note: the log of a resumed run]).
  const log =
    config.logJsonl !== null && lead
      ? await openLog(config.logJsonl, resumed?.step ?? null, earlier.records)
      : null;
  if (log !== null && log.dropped + log.restored > 0) {
    say(
      `log: ${config.logJsonl} keeps its ${log.kept} lines up to step ${firstStep}${log.restored > 0 ? ` (${log.restored} restored from the checkpoint)` : ''}; dropped ${log.dropped} past it (from a run stopped after its last checkpoint)`,
    );
  }
  const progress = createProgress(lead ? io.stdout : () => {}, io.isTTY, io.terminal);
  const heldOut = { ...(data === null ? {} : { tokens: data.validation }), seed: config.seed };
  const evalBatch = Math.min(config.batchSize, 16);
  const shortSample = async (length: number) =>
    model instanceof GPT && data !== null && length > 0
      ? sample(model, prepared.evalForward, data.decoder, { seed: config.seed, length })
      : '';

  // The loop.
  const records: StepRecord[] = [];
  const evals: EvalPoint[] = [];
  const tokensPerStep = config.batchSize * (config.model === 'gpt' ? config.blockSize : 1);
  const started = performance.now();
  let interrupted: InterruptedError | null = null;
  const interrupt = async (signal: StopSignal, step: number) => {
    let checkpoint: string | null = null;
    if (config.checkpointDir !== null && step > firstStep) {
      if (step % config.checkpointEvery !== 0) await saveCheckpoint(step);
      checkpoint = joinPath(config.checkpointDir, stepDirName(step));
    }
    return new InterruptedError(signal, { step, steps: config.steps, checkpoint, lead });
  };
  // A signal before the first step (during the probe, say): a single rank stops now; ranks of a
  // job agree after their first step.
  const early = group === null || group.size === 1 ? (io.stop?.signal ?? null) : null;
  if (early !== null) interrupted = await interrupt(early, firstStep);
  try {
    for (let step = firstStep; step < config.steps && interrupted === null; step++) {
      const lr =
        config.lrSchedule === 'cosine'
          ? learningRate(step, config.steps, config.lr, config.warmupSteps)
          : config.lr;
      for (const group of optimizer.paramGroups) group.lr = lr;
      const start = performance.now();
      const microLosses = microBatchLosses(model, prepared, config, data, step, group);
      const result = await accumulatedStep(params, optimizer, microLosses, {
        clip,
        ...prepared.step,
        ...(mixed === undefined ? {} : { mixed }),
        check: (loss) => {
          if (!Number.isFinite(loss)) throw new NonFiniteLossError(step + 1, loss);
        },
      });
      const ms = performance.now() - start;
      const record: StepRecord = {
        step: step + 1,
        steps: config.steps,
        loss: result.loss,
        gradNorm: result.gradNorm,
        lr,
        ms,
        tokensPerSecond: (tokensPerStep * 1000) / ms,
        peakDeviceBytes: backend.memoryStats().peakAllocated,
        ...externalPeak(backend.memoryStats().peakExternalBytes),
        ...(group !== null && group.size > 1
          ? {
              peakDeviceBytesPerRank: await gatherPerRank(
                group,
                backend.memoryStats().peakAllocated,
              ),
            }
          : {}),
        ...(await hostMemoryFields(group)),
      };
      records.push(record);
      const elapsed = (performance.now() - started) / 1000;
      progress.step(record, elapsed);
      if (log !== null) await log.write(logLine(record));
      if (
        config.evalEvery > 0 &&
        record.step % config.evalEvery === 0 &&
        record.step < config.steps
      ) {
        const point = {
          step: record.step,
          loss: await evaluate(model, prepared.evalForward, heldOut, evalBatch),
          sample: await shortSample(60),
        };
        evals.push(point);
        progress.line(
          `eval after step ${point.step}: held-out loss ${point.loss.toFixed(4)}${point.sample ? ` | ${JSON.stringify(point.sample)}` : ''}`,
        );
      }
      if (config.checkpointEvery > 0 && record.step % config.checkpointEvery === 0) {
        await saveCheckpoint(record.step);
      }
      faultPoint('step');
      const stop = await agreedStop(io.stop, group);
      if (stop !== null) {
        interrupted = await interrupt(stop, record.step);
        break;
      }
      if (config.maxSeconds > 0 && elapsed >= config.maxSeconds && record.step < config.steps) {
        progress.line(
          `stopped after step ${record.step} of ${config.steps}: the ${config.maxSeconds} s budget is spent`,
        );
        break;
      }
    }
  } finally {
    progress.done();
    await log?.close();
  }
  if (interrupted !== null) {
    // The device is released here: the CLI exits without touching it again.
    if (modelBackend !== backend) modelBackend.dispose();
    backend.dispose();
    throw interrupted;
  }

  // The end: held-out loss and sample, then the outputs, each written atomically.
  const last = records.at(-1)!;
  const finalSample = await shortSample(config.sampleLength);
  evals.push({
    step: last.step,
    loss: await evaluate(model, prepared.evalForward, heldOut, evalBatch),
    sample: finalSample,
  });
  const seconds = (performance.now() - started) / 1000;
  say(
    `trained ${records.length} steps in ${seconds.toFixed(1)} s: loss ${records[0]!.loss.toFixed(4)} -> ${last.loss.toFixed(4)}, held-out loss ${evals.at(-1)!.loss.toFixed(4)}, peak device memory ${formatBytes(last.peakDeviceBytes)}`,
  );
  if (config.save !== null) {
    const save = config.save;
    await prepared.withFullStateDict(async (dict) => {
      if (dict === null) return;
      const metadata = {
        format: 'pt',
        config: JSON.stringify(model.config),
        steps: String(last.step),
        seed: String(config.seed),
      };
      await writeFileAtomically(save, await encodeSafetensors(Object.fromEntries(dict), metadata));
    });
    say(`saved: ${config.save}`);
  }
  if (!lead) return { model, backend, records, evals, sample: finalSample };
  if (config.samples !== null) await writeFileAtomically(config.samples, finalSample);
  if (config.report !== null) {
    const settings = Object.fromEntries(Object.entries(config).map(([k, v]) => [k, String(v)]));
    await writeFileAtomically(
      config.report,
      renderReport({
        title: `webshard-train: ${config.model}`,
        settings,
        records: [...earlier.records, ...records],
        evals: [...earlier.evals, ...evals],
      }),
    );
    say(`report: ${config.report}`);
  }
  if (finalSample !== '') say(`sample:\n${finalSample}`);
  return { model, backend, records, evals, sample: finalSample };
}

/** The micro-batches' loss closures of one step, this rank's share (see [Note: deterministic batches]). */
function microBatchLosses(
  model: GPT | MLP,
  prepared: PreparedModel,
  config: TrainConfig,
  data: Dataset | null,
  step: number,
  group: ProcessGroup | null,
): (() => Promise<Tensor>)[] {
  const rank = group?.rank ?? 0;
  const perMicro = config.batchSize / (config.worldSize * config.gradAccum);
  if (model instanceof GPT) {
    const batches = rankMicroBatches(data!.train, {
      step,
      batchSize: config.batchSize,
      blockSize: config.blockSize,
      rank,
      worldSize: config.worldSize,
      microBatches: config.gradAccum,
    });
    return batches.map((batch) => async () => {
      const [inputs, targets] = tokenTensors(batch, model);
      const out = await prepared.forward(inputs, targets);
      out.logits?.free();
      return out.loss!;
    });
  }
  const perRank = config.batchSize / config.worldSize;
  return Array.from({ length: config.gradAccum }, (_, m) => async () => {
    const [x, y] = regressionTensors(
      model,
      config.seed,
      step * config.batchSize + rank * perRank + m * perMicro,
      perMicro,
    );
    return (await prepared.forward(x, y)).loss!;
  });
}

/** `peakExternalBytes` where the backend counts memory outside its allocator. */
function externalPeak(bytes: number | undefined): { peakExternalBytes?: number } {
  return bytes === undefined ? {} : { peakExternalBytes: bytes };
}
