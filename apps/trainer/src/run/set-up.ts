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
 * Everything before the first step, in nanoGPT's order: check the inputs and outputs, load the
 * data, check the memory estimate, make the backend, build and initialize the model (or resume
 * it), prepare it for the strategy and make AdamW. Every check that can fail because of the input
 * runs here (see [Note: checks before training]).
 */
export async function setUpRun(
  asked: TrainConfig,
  io: RunIO,
  group: ProcessGroup | null,
): Promise<Run> {
  const lead = group === null || group.rank === 0;
  // The matmul's fused multiply-add, decided by every rank together (a collective; see
  // ranks/job-fma.ts), before any backend exists.
  const fma = await agreeOnFma(asked, group);
  const config: TrainConfig = { ...asked, matmulFma: fma.matmulFma };
  const say = (line: string) => {
    if (lead) io.stdout(`${line}\n`);
  };

  // Inputs and outputs: readable files in, writable paths out, before anything is read or written.
  await checkFiles(config);
  const { data, vocabSize } = await loadData(config, io, say);

  // Memory: refuse a run whose estimate passes the device limit or the host's free memory.
  checkMemory(config, vocabSize, freeHostMemory());

  // Backend and model: seeded nanoGPT init, or --init's weights by PyTorch names.
  const backend = io.createBackend
    ? await io.createBackend(config, vocabSize)
    : await createBackend({ kind: config.backend, ...backendOptions(config) });
  // A set-up that fails from here on (a member lost in the backend check of an elastic world,
  // which builds the run again: elastic-epoch.ts) gives its backends back.
  const owned = [backend];
  try {
    const fmaReason = fmaOffReason(fma);
    if (fmaReason !== null && backend.kind === 'cpu') say(fmaReason);
    if (group !== null && group.size > 1) {
      await checkSameBackend(group, backend);
      say(`backend: ${backend.kind} on all ${group.size} ranks (${backend.description})`);
    } else {
      say(`backend: ${backend.kind} (${backend.description})`);
    }
    // Offload, and fsdp with --move-params-to-cpu, keep the model on the host (a CPU backend of its
    // own) and compute on `backend`.
    const onHost = config.strategy === 'offload' || config.moveParamsToCpu;
    const modelBackend = onHost ? createCpuBackend({ matmulFma: config.matmulFma }) : backend;
    if (modelBackend !== backend) owned.push(modelBackend);
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
    for (const b of owned) b.dispose();
    throw error;
  }
}

/** The data (token windows of a file, or none for the MLP's synthetic stream) and the vocabulary. */
async function loadData(
  config: TrainConfig,
  io: RunIO,
  say: (line: string) => void,
): Promise<{ data: Dataset | null; vocabSize: number }> {
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
  if (data !== null) {
    const count = data.train.length + data.validation.length;
    say(`data: ${dataPath} (${count} ${data.kind}, vocabulary ${vocabSize})`);
  }
  return { data, vocabSize };
}
