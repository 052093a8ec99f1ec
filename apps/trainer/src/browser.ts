// `@webshard/trainer/browser`: what a page needs to train the trainer's GPT itself (the
// playground, apps/playground) or to join a `--browser-ranks` run as a rank. Nothing here reads
// files; `#platform` resolves to the browser's module ([Note: the trainer's platform module]).
export { decideBackend } from './backend-choice.js';
export type { BackendDecision, ProbeResult } from './backend-choice.js';
export { BatchSampler } from './data/batches.js';
export { type CapturedTrainStep, capturedTrainStep } from './captured-train-step.js';
export type { TokenBatch } from './data/batches.js';
export { datasetFromBytes } from './data/dataset.js';
export { rankMicroBatches } from './data/global-batch.js';
export type { Dataset, Decoder } from './data/dataset.js';
export { evaluate, tokenTensors } from './evaluate.js';
export type { EvalForward } from './evaluate.js';
export { GPT, type GPTConfig, type GPTOutput } from '@webshard/tensor-core';
export { runBrowserRank } from './ranks/browser-rank.js';
export type { JoinProgress } from './run/elastic-join.js';
export type {
  BrowserJob,
  BrowserRankHooks,
  ElasticTabStatus,
  LinkMeasure,
  RankStatus,
} from './ranks/browser-rank.js';
export { asleepNote, rejoinedNote } from './ranks/tab-asleep.js';
export { learningRate } from './run/schedule.js';
export { sample } from './sample.js';
export { DEFAULT_MODEL } from './train.js';
export { decayGroups, trainStep } from './train-step.js';
export type { StepResult } from './train-step.js';
