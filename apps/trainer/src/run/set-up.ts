import type { ProcessGroup } from '@webshard/collectives';
import {
  AdamW,
  type Backend,
  createBackend,
  createCpuBackend,
  type GPT,
} from '@webshard/tensor-core';
import {
  checkFiles,
  DEFAULT_CORPUS_PATH,
  freeHostMemory,
  joinPath,
  loadDataset,
  readRunState,
  resolveResume,
  slowBuild,
} from '#platform';
import type { RunState } from '../checkpoint/run-checkpoint.js';
import { newRunId } from '../checkpoint/run-id.js';
import type { TrainConfig } from '../config.js';
import type { Dataset } from '../data/dataset.js';
import { UsageError } from '../errors.js';
import { buildModel, loadInitialWeights } from '../models/build-model.js';
import { checkMemory } from '../models/memory-estimate.js';
import type { MLP } from '../models/mlp.js';
import type { StepRecord } from '../progress.js';
import { backendOptions } from '../backend-choice.js';
import { checkSameBackend } from '../ranks/job-backend.js';
import { agreeOnFma, fmaOffReason } from '../ranks/job-fma.js';
import type { EvalPoint } from '../report/html-report.js';
import { prepareModel } from '../strategy/prepare.js';
import type { PreparedModel } from '../strategy/prepared-model.js';
import type { RunIO } from './run-io.js';

/** One rank's run, ready for its first step: what set-up hands the loop and the finish. */
export interface Run {
  config: TrainConfig;
  io: RunIO;
  group: ProcessGroup | null;
  /** Rank 0 (or the only rank): it prints and writes the files. */
  lead: boolean;
  /** Print `line` on the lead rank. */
  say(line: string): void;
  /** Token windows of a file; null for the MLP's synthetic stream. */
  data: Dataset | null;
  /** Where the run computes. */
  backend: Backend;
  /** Where the model lives: a CPU backend of its own when it stays on the host, else `backend`. */
  modelBackend: Backend;
  model: GPT | MLP;
  /** The model as the strategy drives it ([Note: where the strategies go]). */
  prepared: PreparedModel;
  optimizer: AdamW;
  /** The checkpoint the run resumed from, and its state; null for a fresh run. */
  resumed: { dir: string; state: RunState } | null;
  /** The step the loop starts at: a resumed run's, else 0. */
  firstStep: number;
  runId: string;
  /** A resumed run's steps and evaluations up to `firstStep` (for checkpoints and the report). */
  earlier: { records: StepRecord[]; evals: EvalPoint[] };
}

/**
 * What a rank builds on its own, before it meets the others: the data, the backend and the model
 * from its seed (or `--init`). An elastic member builds it before it asks to join ([Note: a member
 * builds before it joins]); `setUpRun` builds it itself otherwise.
 */
export interface LocalBuild {
  /** The matmul's fused multiply-add the backend was made with. */
  readonly matmulFma: 'auto' | 'off';
  readonly data: Dataset | null;
  readonly vocabSize: number;
  readonly backend: Backend;
  readonly modelBackend: Backend;
  readonly model: GPT | MLP;
  /** What the lead prints of it, once it is known to lead: the data's line and the model's. */
  readonly dataLine: string | null;
  readonly modelLine: string;
}

/** Gives a local build's backends back (a build not used, or a set-up that failed). */
export function disposeLocalBuild(local: LocalBuild): void {
  if (local.modelBackend !== local.backend) local.modelBackend.dispose();
  local.backend.dispose();
}

/**
 * The rank's own part of the set-up, in nanoGPT's order: check the inputs and outputs, load the
 * data, check the memory estimate (where `checkEstimate`: the estimate needs the world's size),
 * make the backend with `config.matmulFma`, build and initialize the model.
 */
export async function buildLocal(
  config: TrainConfig,
  io: RunIO,
  checkEstimate: boolean,
): Promise<LocalBuild> {
  // Inputs and outputs: readable files in, writable paths out, before anything is read or written.
  await checkFiles(config);
  const { data, vocabSize, dataLine } = await loadData(config, io);
  // Memory: refuse a run whose estimate passes the device limit or the host's free memory.
  if (checkEstimate) checkMemory(config, vocabSize, freeHostMemory());
  // Backend and model: seeded nanoGPT init, or --init's weights by PyTorch names.
  const backend = io.createBackend
    ? await io.createBackend(config, vocabSize)
    : await createBackend({ kind: config.backend, ...backendOptions(config) });
  let modelBackend = backend;
  try {
    // Offload, and fsdp with --move-params-to-cpu, keep the model on the host (a CPU backend of its
    // own) and compute on `backend`.
    const onHost = config.strategy === 'offload' || config.moveParamsToCpu;
    if (onHost) modelBackend = createCpuBackend({ matmulFma: config.matmulFma });
    const model = buildModel(config, vocabSize, modelBackend);
    if (config.init !== null) await loadInitialWeights(model, config.init);
    slowBuild();
    const count = model.parameters().reduce((n, p) => n + p.size, 0);
    return {
      matmulFma: config.matmulFma,
      data,
      vocabSize,
      backend,
      modelBackend,
      model,
      dataLine,
      modelLine: `model: ${config.model}, ${count} parameters`,
    };
  } catch (error) {
    if (modelBackend !== backend) modelBackend.dispose();
    backend.dispose();
    throw error;
  }
}

/**
 * Everything before the first step, in nanoGPT's order: check the inputs and outputs, load the
 * data, check the memory estimate, make the backend, build and initialize the model (or resume
 * it), prepare it for the strategy and make AdamW. Every check that can fail because of the input
 * runs here (see [Note: checks before training]). `prebuilt`: the rank's own part, built before
 * it met the group ([Note: a member builds before it joins]); used where the job's matmul FMA is
 * the one it was built with, given back and built again otherwise. A set-up that fails gives its
 * backends back, `prebuilt`'s included.
 */
export async function setUpRun(
  asked: TrainConfig,
  io: RunIO,
  group: ProcessGroup | null,
  prebuilt: LocalBuild | null = null,
): Promise<Run> {
  const lead = group === null || group.rank === 0;
  const say = (line: string) => {
    if (lead) io.stdout(`${line}\n`);
  };
  let local = prebuilt;
  try {
    // The matmul's fused multiply-add, decided by every rank together (a collective; see
    // ranks/job-fma.ts), before any backend is made here.
    const fma = await agreeOnFma(asked, group);
    const config: TrainConfig = { ...asked, matmulFma: fma.matmulFma };
    if (local !== null) {
      if (local.matmulFma !== config.matmulFma) {
        // Built for a kernel the job does not use (a rank that cannot fuse): built again.
        disposeLocalBuild(local);
        local = null;
      } else {
        // Built before the world's size was known: the estimate now.
        checkMemory(config, local.vocabSize, freeHostMemory());
      }
    }
    local ??= await buildLocal(config, io, true);
    const { data, backend, modelBackend, model } = local;
    if (local.dataLine !== null) say(local.dataLine);
    const fmaReason = fmaOffReason(fma);
    if (fmaReason !== null && backend.kind === 'cpu') say(fmaReason);
    if (group !== null && group.size > 1) {
      await checkSameBackend(group, backend);
      say(`backend: ${backend.kind} on all ${group.size} ranks (${backend.description})`);
    } else {
      say(`backend: ${backend.kind} (${backend.description})`);
    }
    // Resuming: where the run was, and (but under fsdp, whose shards load after wrapping) its weights.
    const resumeDir = config.resume === null ? null : await resolveResume(config.resume);
    const resumed = resumeDir === null ? null : await readRunState(resumeDir, config);
    if (resumeDir !== null && config.strategy !== 'fsdp') {
      await loadInitialWeights(model, joinPath(resumeDir, 'model.safetensors'), '--resume');
    }
    say(local.modelLine);
    if (group !== null) {
      // The transport the group really runs on (`shm+tcp` for a thread rank of a job of several
      // nodes, `shm` for one of one node), not the `--transport` flag's, and whether it runs on a
      // communication worker ([Note: where a rank's communication progresses]).
      const onWorker =
        'movesBytesOnWorker' in group.transport ? ' (communication on a worker)' : '';
      say(
        `strategy: ${config.strategy} on ${group.size} rank(s) over ${group.transport.kind}${onWorker}`,
      );
    }

    // The strategy's model, and AdamW on what it steps (f32: masters in 16 bits, shards in fsdp).
    const prepared = prepareModel(model, config, group, backend);
    const optimizer = new AdamW(prepared.groups, {
      lr: config.lr,
      betas: [config.beta1, config.beta2],
      eps: config.eps,
    });
    if (resumeDir !== null && resumed !== null) {
      await prepared.loadCheckpoint(resumeDir, optimizer);
      if (resumed.scaler !== null) prepared.mixed?.scaler.loadStateDict(resumed.scaler);
      say(`resumed: ${resumeDir} (step ${resumed.step})`);
    }
    await prepared.start?.(optimizer);
    const firstStep = resumed?.step ?? 0;
    return {
      config,
      io,
      group,
      lead,
      say,
      data,
      backend,
      modelBackend,
      model,
      prepared,
      optimizer,
      resumed: resumeDir !== null && resumed !== null ? { dir: resumeDir, state: resumed } : null,
      firstStep,
      // A resumed run keeps its id and the steps before its checkpoint (for the report).
      runId: resumed?.runId ?? newRunId(),
      earlier: {
        records: resumed?.history.records.filter((r) => r.step <= firstStep) ?? [],
        evals: resumed?.history.evals.filter((e) => e.step <= firstStep) ?? [],
      },
    };
  } catch (error) {
    // A member lost in the backend check of an elastic world builds the run again (elastic-epoch.ts).
    if (local !== null) disposeLocalBuild(local);
    throw error;
  }
}

/** The data (token windows of a file, or none for the MLP's synthetic stream) and the vocabulary. */
async function loadData(
  config: TrainConfig,
  io: RunIO,
): Promise<{ data: Dataset | null; vocabSize: number; dataLine: string | null }> {
  const dataPath = config.model === 'gpt' ? (config.data ?? DEFAULT_CORPUS_PATH) : null;
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
  const count = data === null ? 0 : data.train.length + data.validation.length;
  const dataLine =
    data === null ? null : `data: ${dataPath} (${count} ${data.kind}, vocabulary ${vocabSize})`;
  return { data, vocabSize, dataLine };
}
