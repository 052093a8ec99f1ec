export { buildModel, loadInitialWeights } from './models/build-model.js';
export { checkMemory, estimateBytes } from './models/memory-estimate.js';
export { parseOptions } from './cli/options.js';
export { USAGE } from './cli/usage.js';
export { STRATEGIES } from './config.js';
export type { Strategy, TrainConfig } from './config.js';
export { DEFAULT_CORPUS_PATH, loadCorpus } from './corpus.js';
export { BatchSampler } from './data/batches.js';
export type { TokenBatch } from './data/batches.js';
export { CharTokenizer } from './data/char-tokenizer.js';
export { datasetFromBytes } from './data/dataset.js';
export { loadDataset } from './data/read-dataset.js';
export type { Dataset, Decoder } from './data/dataset.js';
export { rankMicroBatches, sampleStart } from './data/global-batch.js';
export type { RankSlice } from './data/global-batch.js';
export { NonFiniteLossError, UsageError } from './errors.js';
export { evaluate } from './evaluate.js';
export { removePendingOutputs, writeFileAtomically } from './io/atomic-write.js';
export { GPT, type GPTConfig, type GPTOptions, type GPTOutput } from '@webshard/tensor-core';
export { MLP } from './models/mlp.js';
export type { MLPConfig } from './models/mlp.js';
export { createProgress, formatBytes, formatStep } from './progress.js';
export type { Progress, StepRecord } from './progress.js';
export { renderReport } from './report/html-report.js';
export type { EvalPoint, ReportData } from './report/html-report.js';
export { main } from './run-cli.js';
export { drawToken, sample } from './sample.js';
export type { CliIO, CliOutcome } from './run-cli.js';
export { learningRate } from './run/schedule.js';
export type { RunIO, TrainSummary } from './run/run-io.js';
export { DEFAULT_MODEL, train } from './train.js';
export {
  accumulatedStep,
  decayGroups,
  mixedPrecisionStep,
  trainStep,
} from './train-step.js';
export type { MixedState, MixedStepResult, StepResult } from './train-step.js';
