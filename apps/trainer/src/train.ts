import type { ProcessGroup } from '@webshard/collectives';
import type { TrainConfig } from './config.js';
import type { GPTConfig } from '@webshard/tensor-core';
import { finishRun } from './run/finish.js';
import { runLoop } from './run/loop.js';
import type { RunIO, TrainSummary } from './run/run-io.js';
import { setUpRun } from './run/set-up.js';

/** The model `pnpm train` trains (the CLI's defaults): nanoGPT's shape, small enough for 2 cores. */
export const DEFAULT_MODEL: Omit<GPTConfig, 'vocabSize'> = {
  blockSize: 32,
  nLayer: 2,
  nHead: 4,
  nEmbd: 64,
  dropout: 0,
  bias: true,
};

/**
 * One training run as nanoGPT's `train.py` reads, in three parts (run/): set-up checks the inputs
 * and outputs, loads the data, builds and initializes the model (every check that can fail because
 * of the input runs before the first step: [Note: checks before training]); the loop steps with
 * deterministic batches split in micro-batches, AdamW with nanoGPT's decay groups, clipping and
 * the schedule; the finish evaluates on the held-out tenth, samples and saves.
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
  const run = await setUpRun(config, io, group);
  const loop = await runLoop(run);
  if (loop.interrupted !== null) {
    // The device is released here: the CLI exits without touching it again.
    if (run.modelBackend !== run.backend) run.modelBackend.dispose();
    run.backend.dispose();
    throw loop.interrupted;
  }
  return finishRun(run, loop);
}
