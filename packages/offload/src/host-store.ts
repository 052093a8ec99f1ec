import type { Tensor } from '@webshard/tensor-core';
import { axpy_ } from '@webshard/tensor-core/backend';

/**
 * What lives on the host between a slice's visits to the device: gradients accumulated so far and
 * (with activation checkpointing) each slice's boundary input, one tensor per micro-batch.
 *
 * Gradients: a slice is uploaded for backward without its gradients (they stay on the host,
 * `stashGrads`); backward writes fresh gradients on the device, which travel down with the
 * parameters and are added into the stashed ones there (`restoreGrads`). So gradients accumulate
 * on the host across micro-batches, backward calls and steps, as PyTorch's `.grad` does, and the
 * device never holds more than one slice's gradients.
 */
export class HostStore {
  private readonly stashed = new Map<Tensor, Tensor>();
  private readonly inputs = new Map<number, Tensor[]>();

  /** Take each parameter's `.grad` off it and keep it here (before an upload for backward). */
  stashGrads(params: readonly Tensor[]): void {
    for (const p of params) {
      if (p.grad === null) continue;
      this.stashed.set(p, p.grad);
      p.grad = null;
    }
  }

  /** Add each parameter's new (downloaded) gradient into its stashed one and put that back. */
  restoreGrads(params: readonly Tensor[]): void {
    for (const p of params) {
      const kept = this.stashed.get(p);
      if (kept === undefined) continue;
      this.stashed.delete(p);
      if (p.grad !== null) {
        axpy_(kept, 1, p.grad);
        p.grad.free();
      }
      p.grad = kept;
    }
  }

  /** Keep a slice's boundary inputs (host tensors, one per micro-batch) until its backward. */
  setInputs(slice: number, tensors: Tensor[]): void {
    this.freeInputs(slice);
    this.inputs.set(slice, tensors);
  }

  /** A slice's boundary inputs; empty when none were kept. */
  inputsOf(slice: number): readonly Tensor[] {
    return this.inputs.get(slice) ?? [];
  }

  freeInputs(slice: number): void {
    for (const t of this.inputs.get(slice) ?? []) t.free();
    this.inputs.delete(slice);
  }

  /** Free every boundary input (a new forward replaces the last one's). */
  clearInputs(): void {
    for (const slice of [...this.inputs.keys()]) this.freeInputs(slice);
  }
}
