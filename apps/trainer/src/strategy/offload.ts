import { OffloadConfigError, OffloadModel, SliceTooLargeError } from '@webshard/offload';
import {
  type Backend,
  concat,
  GPT,
  gptLoss,
  keep,
  narrow,
  noGrad,
  Sequential,
  type Tensor,
} from '@webshard/tensor-core';
import { loadFullOptimizer, saveFullCheckpoint } from '#platform';
import type { TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';
import { layersOf } from '../models/layers.js';
import type { MLP } from '../models/mlp.js';
import { decayGroups } from '../train-step.js';
import type { PreparedModel } from './prepared-model.js';

/**
 * `--strategy offload`: fairscale's `OffloadModel` over the model's layers (the GPT's embedding,
 * blocks and head; the MLP's three). The model is built on the host backend, where its parameters,
 * gradients and AdamW's state stay; `--num-slices` slices stream through `device` (the compute
 * backend, its `--memory-limit` the emulated device), `--num-microbatches` chunks at a time, with
 * `--checkpoint-activation` recomputing each slice in backward. The tied `wte`/`lm_head` weight
 * stays on the device for the step ([Note: tied tensors across slices] in the offload package).
 * One rank, f32; the loss is computed on the device from the logits, as `GPT.forward` does.
 */
export function prepareOffload(
  model: GPT | MLP,
  config: TrainConfig,
  device: Backend,
): PreparedModel {
  const host = model.parameters()[0]!.backend;
  let offloaded: OffloadModel;
  try {
    // A Sequential, which `OffloadModel` cuts into `numSlices` (a list would be taken as the slices).
    offloaded = new OffloadModel(new Sequential(...layersOf(model)), {
      device,
      offloadDevice: host,
      numSlices: config.numSlices,
      numMicrobatches: config.numMicrobatches,
      checkpointActivation: config.checkpointActivation,
    });
  } catch (error) {
    // Refused before the first step: the slice count, or a layer too large for the device.
    if (OffloadConfigError.isInstance(error)) {
      const reason = error.message.replace(/^\[OffloadModel\] \w+: /, '');
      throw new UsageError(`--num-slices ${config.numSlices}: ${reason}`, {
        option: '--num-slices',
        cause: error,
      });
    }
    if (SliceTooLargeError.isInstance(error)) {
      const layer = `layer '${error.layer}' needs ${error.bytes} bytes for its parameters and gradients`;
      throw new UsageError(
        `--memory-limit ${config.memoryLimit}: ${layer}, more than the device holds`,
        {
          option: '--memory-limit',
          cause: error,
        },
      );
    }
    throw error;
  }
  const params = offloaded.parameters();
  // A training forward's output is a leaf that requires grad, which autograd saves by reference
  // (as it does parameters): it must live until its backward has run, so it is freed at the next
  // forward (the next micro-batch's, or the next step's), kept out of the caller's `tidy` scope.
  let held: Tensor[] = [];
  const forward = async (input: Tensor, target: Tensor | null) => {
    for (const t of held) t.free();
    held = [];
    const out = await offloaded.forward(input);
    if (target === null) return { logits: out, loss: null };
    const onDevice = target.backend === device ? target : await target.to(device);
    if (onDevice !== target) held.push(keep(onDevice));
    const loss = model instanceof GPT ? gptLoss(out, onDevice) : model.lossOf(out, onDevice);
    if (!out.requiresGrad) return { logits: out, loss };
    held.push(keep(out));
    return { logits: null, loss };
  };
  // [Note: sampling through micro-batches]
  // Sampling runs one sequence (a batch of 1), which `OffloadModel` refuses to cut into
  // `--num-microbatches` chunks (the count must divide the batch). Such a batch is repeated
  // `numMicrobatches` times, which any count divides, and the logits of the first copy are kept:
  // the same logits, at a few times the compute of one short sequence.
  const evalForward = async (input: Tensor, target: Tensor | null) => {
    const chunks = config.numMicrobatches;
    if ((input.shape[0] ?? 0) % chunks === 0) return forward(input, target);
    const batch = input.shape[0]!;
    const repeated = noGrad(() => concat(new Array<Tensor>(chunks).fill(input), 0));
    const targets =
      target === null ? null : noGrad(() => concat(new Array<Tensor>(chunks).fill(target), 0));
    const out = await forward(repeated, targets);
    repeated.free();
    targets?.free();
    if (out.logits === null) return out;
    const logits = noGrad(() => narrow(out.logits!, 0, 0, batch));
    out.logits.free();
    return { logits, loss: out.loss };
  };
  return {
    forward,
    evalForward,
    groups: decayGroups(params, config.weightDecay),
    params,
    step: {},
    withFullStateDict: (fn) => fn(model.stateDict()),
    saveCheckpoint: (dir, optimizer) => saveFullCheckpoint(dir, model.stateDict(), optimizer),
    loadCheckpoint: (dir, optimizer) => loadFullOptimizer(dir, optimizer, host),
  };
}
