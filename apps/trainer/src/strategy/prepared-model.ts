import type {
  AdamHyperparameters,
  Optimizer,
  ParamGroupInput,
  Tensor,
} from '@webshard/tensor-core';
import type { DiLoCo } from '@webshard/diloco';
import type { RunState } from '../checkpoint/run-checkpoint.js';
import type { MixedState, StepOptions } from '../train-step.js';
import type { TrainOutput } from './train-module.js';

/** A model made ready for one rank of a strategy: what the training loop drives. */
export interface PreparedModel {
  /** Forward of one micro-batch under the strategy (gathers, gradient buckets). */
  forward(input: Tensor, target: Tensor | null): Promise<TrainOutput>;
  /** Forward for evaluation and samples; every rank calls it with the same inputs. */
  evalForward(input: Tensor, target: Tensor | null): Promise<TrainOutput>;
  /** What the optimizer steps (this rank's shards under FSDP), in nanoGPT's two decay groups. */
  groups: ParamGroupInput<AdamHyperparameters>[];
  /** Every tensor in `groups`. */
  params: Tensor[];
  mixed?: MixedState;
  /** The strategy's part of a step: how to clip, skip reduction, and average the loss. */
  step: Pick<StepOptions, 'clipGrads' | 'noSync' | 'meanOverRanks'>;
  /**
   * Run `fn` on the full f32 state dict under PyTorch names (rank 0; every rank must call it, the
   * others get null). The tensors are valid only inside `fn`.
   */
  withFullStateDict<T>(fn: (dict: Map<string, Tensor> | null) => Promise<T>): Promise<T>;
  /** Write this rank's part of a checkpoint into `dir` (every rank calls it). */
  saveCheckpoint(dir: string, optimizer: AnyOptimizer, state: RunState): Promise<void>;
  /**
   * Restore what the model does not already hold from checkpoint `dir`: the optimizer (single,
   * ddp: their weights are loaded before wrapping), or shards and optimizer (fsdp).
   */
  loadCheckpoint(dir: string, optimizer: AnyOptimizer): Promise<void>;
  /** Unhook the strategy from the model (DDP's gradient hooks), before it is prepared again. */
  release?(): void;
  /** Settles when the strategy's own set-up collectives are done (DDP's initial broadcast). */
  ready?: Promise<void>;
  /**
   * A line about a choice the strategy made while training (ddp's all-reduce mode once timed),
   * returned once; null when there is nothing new. The loop prints it after the step.
   */
  news?(): string | null;
  /**
   * Called once the optimizer is made (and loaded on resume), before the first step, on every rank:
   * diloco's initial broadcast of rank 0's parameters.
   */
  start?(optimizer: AnyOptimizer): Promise<void>;
  /**
   * Called after each optimizer step (`step` from 0) on every rank: diloco's outer sync every
   * `--inner-steps` steps and after the last. What the sync did, or null when there was none.
   */
  afterStep?(step: number): Promise<OuterSyncReport | null>;
  /**
   * Whether step `step` (from 0) runs none of the loop's own collectives (the step line's
   * all-gather of per-rank numbers and the agreed stop on a signal, and the loss's mean over
   * ranks): diloco between its syncs, where one collective a step would cost more latency on a
   * slow link than the step's compute. The loss of such a step is this rank's own, and a signal
   * stops the ranks a step after the next step that is not quiet.
   */
  quietStep?(step: number): boolean;
  /**
   * The loss's mean over ranks comes with the step line's all-gather, a step late ([Note: a step
   * line a step late] in run/loop.ts), not from `step.meanOverRanks` before the update: diloco,
   * whose inner steps are each rank's own, so a non-finite loss stops its rank where it is seen, as
   * between syncs, and its peers fail with that rank's error.
   */
  lossMeanInLine?: boolean;
  /** diloco under `--elastic`: the outer sync, run by the elastic loop at its sync points. */
  outer?: ElasticOuter;
}

/**
 * DiLoCo as the elastic loop drives it ([Note: DiLoCo in an elastic world] in @webshard/diloco,
 * [Note: elastic training in the trainer]): the wrapper once `start` made it, whether a step (from
 * 0) ends at a sync point, and `adopt` to carry a wrapper over into a model prepared for a new
 * group (regrouped onto it).
 */
export interface ElasticOuter {
  readonly diloco: DiLoCo | null;
  due(step: number): boolean;
  adopt(previous: DiLoCo): void;
}

/** What an outer sync did, for the step's record. */
export interface OuterSyncReport {
  /** Outer steps so far. */
  outerStep: number;
  /** Bytes this rank sent in the sync. */
  bytesSent: number;
  /** ms from the sync's issue to its average done on this rank (0 where not measured). */
  syncMs: number;
  /** Of those, the ms the step waited for the network. */
  waitMs: number;
}

/** A sync's fields on its step's record (and JSONL line), the ms to a tenth. */
export function outerSyncFields(report: OuterSyncReport) {
  return {
    outerStep: report.outerStep,
    outerBytesSent: report.bytesSent,
    outerSyncMs: Math.round(report.syncMs * 10) / 10,
    outerWaitMs: Math.round(report.waitMs * 10) / 10,
  };
}

/** Any optimizer the strategies checkpoint (AdamW in the trainer). */
export type AnyOptimizer = Optimizer<object, object>;
