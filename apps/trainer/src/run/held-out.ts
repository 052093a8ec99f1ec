import { evaluate } from '../evaluate.js';
import { GPT } from '@webshard/tensor-core';
import { sample } from '../sample.js';
import type { Run } from './set-up.js';

/** The held-out loss of the model as it is (every rank calls it: FSDP needs each for a forward). */
export function heldOutLoss(run: Run): Promise<number> {
  const { config, data } = run;
  const heldOut = { ...(data === null ? {} : { tokens: data.validation }), seed: config.seed };
  return evaluate(run.model, run.prepared.evalForward, heldOut, Math.min(config.batchSize, 16));
}

/** A sample of `length` tokens from the GPT ('' for the MLP, or a length of 0). */
export async function shortSample(run: Run, length: number): Promise<string> {
  const { model, data } = run;
  return model instanceof GPT && data !== null && length > 0
    ? sample(model, run.prepared.evalForward, data.decoder, { seed: run.config.seed, length })
    : '';
}
