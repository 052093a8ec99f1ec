export { loadCorpus, DEFAULT_CORPUS_PATH } from './corpus.js';
export { BatchSampler, mulberry32 } from './data/batches.js';
export type { TokenBatch } from './data/batches.js';
export { CharTokenizer } from './data/char-tokenizer.js';
export { GPT } from './models/gpt.js';
export type { GPTConfig, GPTOptions, GPTOutput } from './models/gpt.js';
export { MLP } from './models/mlp.js';
export type { MLPConfig } from './models/mlp.js';
export { formatStep, runCli, USAGE } from './run-cli.js';
export type { CliIO, CliResult } from './run-cli.js';
export {
  DEFAULT_MODEL,
  learningRate,
  sample,
  saveCheckpoint,
  trainGpt,
} from './train.js';
export type { StepRecord, TrainOptions, TrainResult } from './train.js';
export { decayGroups, mixedPrecisionStep, trainStep } from './train-step.js';
export type { MixedStepResult, StepResult } from './train-step.js';
