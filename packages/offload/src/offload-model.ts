import {
  backward,
  chunk,
  clone,
  concat,
  enableGrad,
  RandomGenerator,
  getDefaultGenerator,
  isGradEnabled,
  keep,
  noGrad,
  type RunningBackward,
  type Sequential,
  type StepOptions,
  type Tensor,
} from '@webshard/tensor-core';
import { moveTensors_ } from '@webshard/tensor-core/backend';
import {
  type Layer,
  type OffloadOptions,
  type ResolvedOffloadOptions,
  resolveOptions,
} from './api.js';
import { MicrobatchError, OffloadConfigError, OffloadError, SliceTooLargeError } from './errors.js';
import { type SteppableOptimizer, stepSlicesOnDevice } from './device-step.js';
import { HostStore } from './host-store.js';
import { layerDeviceBytes, planSlices, type Slice, type SlicePlan } from './slice-plan.js';
import { TransferQueue, type TransferStats } from './transfer.js';

type RngState = { seed: number; offset: number };

/** What one slice's forward left for its backward. */
interface SliceRecord {
  /** Without checkpointing: each micro-batch's input leaf and output (the graph's root). */
  readonly leaves: Tensor[];
  readonly outputs: Tensor[];
  /** With checkpointing: the random streams' state at each micro-batch's forward. */
  readonly states: RngState[][];
}

/** The state a training forward leaves for the backward its output triggers. */
interface Pending {
  readonly records: SliceRecord[];
  readonly input: Tensor | null;
}

function generatorsOf(slice: Slice): RandomGenerator[] {
  const found = new Set<RandomGenerator>([getDefaultGenerator()]);
  for (const layer of slice.layers) {
    for (const m of layer.modules()) {
      const g = (m as { generator?: unknown }).generator;
      if (g instanceof RandomGenerator) found.add(g);
    }
  }
  return [...found];
}

/** The transfer chain of the tensors shared by slices (slices use 0, 1, ...). */
const SHARED = -1;

/**
 * [Note: tied tensors across slices]
 * A tensor used by layers of two slices (nanoGPT's `lm_head.weight`, the token embedding of the
 * first slice) cannot move with either: the first slice's download would take it off the device
 * while the last one computes with it, and each slice's upload for backward would stash the other
 * use's gradient. So the plan keeps such tensors out of every slice (`SlicePlan.shared`) and they
 * stay on the device for the whole step: uploaded (their host gradients stashed) before the first
 * slice's forward, left there through backward, where autograd adds both uses' gradients on the
 * device, and downloaded with those gradients (added into the stashed ones) at the end of backward,
 * or at the end of a forward that records no graph. The device holds them on top of the slices'
 * peak; the optimizer steps them with the rest, on the host (or as one more slice on the device
 * with `optimizerOnDevice`).
 */

/**
 * [Note: streaming a model through the device]
 * fairscale's `OffloadModel` on tensor-core. The model's parameters, gradients and optimizer state
 * live on the host backend; `forward` brings one slice at a time to the device with `moveTensors_`
 * (the parameters keep their identity, so the optimizer, the module and any recorded graph still
 * know them), runs it on each micro-batch, and sends it back.
 * - Forward, per slice: wait for its upload; start the next slice's upload (`prefetch`); run the
 *   micro-batches; start the download of its parameters. Without `checkpointActivation` each
 *   micro-batch runs with autograd recording from a fresh input leaf, so the slice's saved
 *   activations stay on the device in its graph, the input leaf (saved by reference) is moved to
 *   the host with the parameters, and the output's storage is freed (backward only needs its
 *   node). With it, the slice runs without recording and only its input is copied to the host,
 *   with the random streams' positions. The output of the last slice stays on the device: it is
 *   returned as a leaf that requires grad, like fairscale's `OffloadFunction` output.
 * - Backward starts from that leaf's post-accumulate hook (so `loss.backward()` drives it, and
 *   the outer backward awaits it). Slices in reverse: the slice is uploaded without its host
 *   gradients (`HostStore.stashGrads`), each micro-batch backpropagates with a nested `backward`
 *   from its output (recomputed first with checkpointing, random streams restored, so dropout
 *   masks match), the input gradients feed the previous slice, and the parameters go back down
 *   with their new gradients, which are added into the host ones. The previous slice's upload
 *   starts before this slice computes, and this slice's download runs while the previous one
 *   computes. The input's own gradient, when it requires grad, continues into its graph.
 * - What overlaps: the transfers are promises; on WebGPU the uploads are queued writes and the
 *   downloads are buffer maps that resolve while the next slice's kernels run. The CPU backend
 *   computes synchronously, so there a transfer completes before the next slice starts.
 * - Memory on the device at the peak: about two slices' parameters and gradients (the current and
 *   the prefetched one; one with `prefetch: false`), the micro-batch's activations (all of the
 *   slice's with checkpointing, the whole model's saved activations without) and the boundary
 *   tensors of one slice.
 */
export class OffloadModel {
  readonly options: ResolvedOffloadOptions;
  readonly plan: SlicePlan;
  private readonly transfers: TransferQueue;
  private readonly store = new HostStore();
  private offloaded: Promise<void> | undefined;
  private pending: Pending | undefined;

  /**
   * Wrap `model` (a `Sequential`, cut into `numSlices` slices balanced by parameter count, or a
   * list of modules taken as the slices). Throws `OffloadConfigError` for a bad option or model
   * and `SliceTooLargeError` for a layer that alone passes the device's memory limit. The
   * parameters move to `offloadDevice` at the first `forward` (or `offload()`).
   */
  constructor(model: Sequential | readonly Layer[], options: OffloadOptions) {
    this.options = resolveOptions(options);
    this.plan = planSlices(model, this.options.numSlices);
    this.checkLayerSizes();
    this.transfers = new TransferQueue(this.options.device, this.options.offloadDevice);
  }

  /** Every parameter of the model, slice by slice, then those shared by slices (to give to an optimizer). */
  parameters(): Tensor[] {
    return [...this.plan.slices.flatMap((s) => [...s.params]), ...this.plan.shared.params];
  }

  private sharedTensors(): Tensor[] {
    return [...this.plan.shared.params, ...this.plan.shared.buffers];
  }

  /** Bring the shared tensors to the device for a step (their host gradients stashed when training). */
  private uploadShared(training: boolean): Promise<void> {
    const shared = this.sharedTensors();
    if (shared.length === 0) return Promise.resolve();
    return this.transfers.upload(SHARED, () => {
      if (training) this.store.stashGrads(this.plan.shared.params);
      return shared;
    });
  }

  /** Take them back to the host, adding the gradients made on the device into the stashed ones. */
  private downloadShared(): Promise<void> {
    const shared = this.sharedTensors();
    if (shared.length === 0) return Promise.resolve();
    return this.transfers.download(
      SHARED,
      () => shared,
      () => this.store.restoreGrads(this.plan.shared.params),
    );
  }

  /** Bytes and transfers moved so far between the device and the host. */
  get transferStats(): Readonly<TransferStats> {
    return this.transfers.stats;
  }

  /** Training mode of every layer (dropout on), like `Module.train`. */
  train(mode = true): this {
    for (const layer of this.plan.layers) layer.train(mode);
    return this;
  }

  eval(): this {
    return this.train(false);
  }

  private checkLayerSizes(): void {
    const limit = this.options.device.memoryStats().limit;
    if (limit === undefined) return;
    this.plan.layers.forEach((layer, i) => {
      const bytes = layerDeviceBytes(layer);
      if (bytes > limit) throw new SliceTooLargeError(this.plan.layerNames[i]!, bytes, limit);
    });
  }

  private tensorsOf(slice: Slice): Tensor[] {
    return [...slice.params, ...slice.buffers];
  }

  /** Move the whole model (and any gradients) to the host; `forward` does it the first time. */
  offload(): Promise<void> {
    this.offloaded ??= moveTensors_(
      [...this.plan.slices.flatMap((s) => this.tensorsOf(s)), ...this.sharedTensors()],
      this.options.offloadDevice,
    );
    return this.offloaded;
  }

  private runSlice(slice: Slice, x: Tensor): Tensor {
    let current = x;
    slice.layers.forEach((layer, i) => {
      const next = layer.call(current) as unknown;
      if (next instanceof Promise) {
        throw new OffloadError(
          'forward',
          `layer '${slice.layerNames[i]}' returned a promise: OffloadModel runs layers whose call is synchronous`,
        );
      }
      if (current !== x) current.free();
      current = next as Tensor;
    });
    return current === x ? noGrad(() => clone(x)) : current;
  }

  private upload(index: number, forBackward: boolean, extra: () => Tensor[] = () => []): void {
    const slice = this.plan.slices[index]!;
    this.transfers.upload(index, () => {
      if (forBackward) this.store.stashGrads(slice.params);
      return [...this.tensorsOf(slice), ...extra()];
    });
  }

  private download(index: number, extra: () => Tensor[] = () => []): void {
    const slice = this.plan.slices[index]!;
    this.transfers.download(
      index,
      () => [...this.tensorsOf(slice), ...extra()],
      () => this.store.restoreGrads(slice.params),
    );
  }

  private splitBatch(x: Tensor): Tensor[] {
    const m = this.options.numMicrobatches;
    return noGrad(() => {
      if (m === 1) return [clone(x)];
      const parts = chunk(x, m);
      return parts.map((part) => {
        const own = clone(part);
        part.free();
        return own;
      });
    });
  }

  /**
   * Run the model on `input` (batch first). Under grad mode the result is a leaf on the device
   * that requires grad: a backward that reaches it runs the offloaded backward, which accumulates
   * the parameters' gradients on the host. Throws `MicrobatchError` when `numMicrobatches` does
   * not divide the batch, `OffloadConfigError` for an input that requires grad off the device.
   */
  async forward(input: Tensor): Promise<Tensor> {
    const {
      device,
      offloadDevice: host,
      numMicrobatches,
      checkpointActivation,
      prefetch,
    } = this.options;
    const batch = input.shape[0] ?? 0;
    if (input.rank === 0 || batch % numMicrobatches !== 0) {
      throw new MicrobatchError(batch, numMicrobatches);
    }
    if (input.requiresGrad && input.backend !== device) {
      throw new OffloadConfigError(
        'input',
        input.backend.kind,
        'an input that requires grad must be on the device, so its gradient can continue into its graph',
      );
    }
    this.checkLayerSizes();
    await this.offload();
    await this.transfers.drain();
    await this.discardPending();
    const training = isGradEnabled();
    await this.uploadShared(training);
    const uploaded = input.backend === device ? input : await input.to(device);
    let chunks = this.splitBatch(uploaded);
    if (uploaded !== input) uploaded.free();
    const slices = this.plan.slices;
    const records: SliceRecord[] = [];
    this.upload(0, false);
    for (const slice of slices) {
      const i = slice.index;
      await this.transfers.wait(i);
      // The previous slice's download is done before the next upload starts: two slices at most.
      if (i > 0) await this.transfers.wait(i - 1);
      if (i + 1 < slices.length && prefetch) this.upload(i + 1, false);
      const record: SliceRecord = { leaves: [], outputs: [], states: [] };
      const outputs: Tensor[] = [];
      const generators = generatorsOf(slice);
      for (const x of chunks) {
        if (!training || checkpointActivation) {
          if (training) record.states.push(generators.map((g) => g.getState()));
          outputs.push(noGrad(() => this.runSlice(slice, x)));
        } else {
          x.requiresGrad = i > 0 || input.requiresGrad;
          const y = enableGrad(() => this.runSlice(slice, x));
          // Kept past the caller's `tidy` scope: backward needs them after forward returns.
          record.leaves.push(keep(x));
          record.outputs.push(keep(y));
          outputs.push(noGrad(() => clone(y)));
          y.free();
        }
      }
      records.push(record);
      if (training && checkpointActivation) {
        const inputs = await Promise.all(chunks.map((x) => x.to(host)));
        this.store.setInputs(
          i,
          inputs.map((x) => keep(x)),
        );
      }
      if (training && !checkpointActivation) {
        for (const x of record.leaves) if (!x.requiresGrad) x.free();
        const moving = record.leaves.filter((x) => x.requiresGrad);
        // A leaf whose storage something else still holds stays on the device (see the Note).
        this.download(i, () => moving.filter((x) => !x.isFreed && x.storage().refCount === 1));
      } else {
        for (const x of chunks) x.free();
        this.download(i);
      }
      if (!prefetch && i + 1 < slices.length) this.upload(i + 1, false);
      chunks = outputs;
    }
    const out = noGrad(() => (chunks.length === 1 ? chunks[0]! : concat(chunks)));
    if (chunks.length > 1) for (const c of chunks) c.free();
    if (!training) {
      await this.downloadShared();
      return out;
    }
    out.requiresGrad = true;
    this.pending = { records, input: input.requiresGrad ? input : null };
    out.registerPostAccumulateGradHook((leaf, running) => this.backwardFrom(leaf, running));
    return out;
  }

  /** Same as `forward`. */
  call(input: Tensor): Promise<Tensor> {
    return this.forward(input);
  }

  private async discardPending(): Promise<void> {
    const pending = this.pending;
    this.pending = undefined;
    this.store.clearInputs();
    if (pending === undefined) return;
    for (const record of pending.records) for (const x of record.leaves) x.free();
    // A training forward whose backward never came left the shared tensors on the device.
    await this.downloadShared();
  }

  private async backwardFrom(out: Tensor, running: RunningBackward): Promise<void> {
    const pending = this.pending;
    const grad = out.grad;
    out.grad = null;
    if (pending === undefined || grad === null) {
      throw new OffloadError(
        'backward',
        "no forward is waiting for this backward: backpropagate each forward's output once",
      );
    }
    this.pending = undefined;
    const { device, checkpointActivation, prefetch } = this.options;
    const slices = this.plan.slices;
    let grads = this.splitBatch(grad);
    grad.free();
    const last = slices.length - 1;
    const leavesOf = (i: number) => () => pending.records[i]!.leaves.filter((x) => !x.isFreed);
    this.upload(last, true, leavesOf(last));
    for (let i = last; i >= 0; i--) {
      const slice = slices[i]!;
      const record = pending.records[i]!;
      await this.transfers.wait(i);
      if (i < last) await this.transfers.wait(i + 1);
      if (prefetch && i > 0) this.upload(i - 1, true, leavesOf(i - 1));
      const inputGrads: (Tensor | null)[] = [];
      const generators = generatorsOf(slice);
      for (let j = 0; j < grads.length; j++) {
        let x: Tensor;
        let y: Tensor;
        if (checkpointActivation) {
          x = await this.store.inputsOf(i)[j]!.to(device);
          x.requiresGrad = i > 0 || pending.input !== null;
          const current = generators.map((g) => g.getState());
          generators.forEach((g, k) => {
            g.setState(record.states[j]![k]!);
          });
          try {
            y = enableGrad(() => this.runSlice(slice, x));
          } finally {
            generators.forEach((g, k) => {
              g.setState(current[k]!);
            });
          }
        } else {
          x = record.leaves[j]!;
          y = record.outputs[j]!;
        }
        if (y.requiresGrad) await backward(y, grads[j]!, { nestedIn: running });
        if (checkpointActivation) y.free();
        inputGrads.push(x.grad);
        x.grad = null;
        x.free();
        grads[j]!.free();
      }
      this.store.freeInputs(i);
      this.download(i);
      if (!prefetch && i > 0) this.upload(i - 1, true, leavesOf(i - 1));
      grads = inputGrads.filter((g): g is Tensor => g !== null);
    }
    if (pending.input !== null && grads.length > 0) {
      const full = noGrad(() => (grads.length === 1 ? grads[0]! : concat(grads)));
      await backward(pending.input, full, { nestedIn: running });
      if (full !== grads[0]) full.free();
    }
    for (const g of grads) g.free();
    await this.downloadShared();
    await this.transfers.drain();
  }

  /**
   * One optimizer step. With `optimizerOnDevice: false` (the default) it runs where the parameters
   * are, on the host. With `optimizerOnDevice: true` each slice's parameters, gradients and
   * optimizer state go to the device, step there and come back, one slice at a time (the others'
   * gradients are held back so the optimizer skips them).
   */
  async step(optimizer: SteppableOptimizer, options?: StepOptions): Promise<void> {
    await this.transfers.drain();
    if (!this.options.optimizerOnDevice) {
      optimizer.step(options);
      return;
    }
    await stepSlicesOnDevice(
      optimizer,
      this.plan.shared.params.length === 0
        ? this.plan.slices
        : [...this.plan.slices, this.plan.shared],
      this.options,
      options,
    );
  }
}
