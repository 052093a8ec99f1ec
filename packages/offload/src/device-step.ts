import type { Backend, StepOptions, Tensor } from '@webshard/tensor-core';
import { moveTensors_ } from '@webshard/tensor-core/backend';
import type { Slice } from './slice-plan.js';

/** An optimizer as `OffloadModel.step` drives it (tensor-core's `Adam`, `AdamW`, `SGD`). */
export interface SteppableOptimizer {
  readonly state: ReadonlyMap<Tensor, object>;
  step(options?: StepOptions): unknown;
}

function isTensorValue(v: unknown): v is Tensor {
  return typeof v === 'object' && v !== null && Symbol.for('webshard.tensor') in v;
}

/** The tensors in the optimizer's state of `params` (moments, momentum buffers). */
function stateTensors(optimizer: SteppableOptimizer, params: readonly Tensor[]): Tensor[] {
  const out: Tensor[] = [];
  for (const p of params) {
    const state = optimizer.state.get(p);
    if (state === undefined) continue;
    for (const v of Object.values(state)) if (v !== p && isTensorValue(v)) out.push(v);
  }
  return out;
}

/**
 * One optimizer step, slice by slice on the device (`optimizerOnDevice`): each slice's parameters,
 * their gradients and their optimizer state move to `device`, the optimizer steps with every other
 * parameter's gradient held back (so it skips them), and everything moves back to `offloadDevice`.
 * State the optimizer creates at a parameter's first step is made on the device and comes back
 * with it. The tensors keep their identity throughout (`moveTensors_`).
 */
export async function stepSlicesOnDevice(
  optimizer: SteppableOptimizer,
  slices: readonly Pick<Slice, 'params'>[],
  backends: { readonly device: Backend; readonly offloadDevice: Backend },
  options?: StepOptions,
): Promise<void> {
  const all = slices.flatMap((s) => [...s.params]);
  for (const slice of slices) {
    const mine = new Set(slice.params);
    const held = new Map<Tensor, Tensor>();
    for (const p of all) {
      if (mine.has(p) || p.grad === null) continue;
      held.set(p, p.grad);
      p.grad = null;
    }
    try {
      await moveTensors_(
        [...slice.params, ...stateTensors(optimizer, slice.params)],
        backends.device,
      );
      optimizer.step(options);
      await moveTensors_(
        [...slice.params, ...stateTensors(optimizer, slice.params)],
        backends.offloadDevice,
      );
    } finally {
      for (const [p, g] of held) p.grad = g;
    }
  }
}
