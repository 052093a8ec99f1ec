import type { Backend, Module, Tensor } from '@webshard/tensor-core';
import { OffloadConfigError } from './errors.js';

/** A layer of an offloaded model: a module of one tensor to one tensor. */
export type Layer = Module<[Tensor], Tensor>;

/** Options of `OffloadModel` (fairscale's `OffloadModel` arguments, camelCased). */
export interface OffloadOptions {
  /** Where slices compute: the WebGPU backend, or a CPU backend (with a memory limit in tests). */
  device: Backend;
  /** Where parameters, gradients, optimizer state and boundary activations live: a CPU backend. */
  offloadDevice: Backend;
  /** Slices the model is cut into, balanced by parameter count (default 3, as fairscale). */
  numSlices?: number;
  /**
   * Keep no activations of a slice on the device between forward and backward: forward runs
   * without recording, only each slice's input is kept (on the host), and backward recomputes the
   * slice from it with the random streams restored (default false).
   */
  checkpointActivation?: boolean;
  /** Chunks the batch (first dimension) is cut into for each slice's compute (default 1). */
  numMicrobatches?: number;
  /**
   * Upload the next slice's parameters while the current slice computes (default true). Costs one
   * more slice of device memory at the peak.
   */
  prefetch?: boolean;
  /**
   * Run `OffloadModel.step` slice by slice on the device (parameters, gradients and optimizer
   * state uploaded and brought back) instead of on the host (default false).
   */
  optimizerOnDevice?: boolean;
}

/** The options with every default filled in; frozen. */
export interface ResolvedOffloadOptions {
  readonly device: Backend;
  readonly offloadDevice: Backend;
  readonly numSlices: number;
  readonly checkpointActivation: boolean;
  readonly numMicrobatches: number;
  readonly prefetch: boolean;
  readonly optimizerOnDevice: boolean;
}

function positiveInteger(option: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) {
    throw new OffloadConfigError(option, value, `${value} is not a positive integer`);
  }
  return value;
}

/** Fill in the defaults and check each option; throws `OffloadConfigError` naming the option. */
export function resolveOptions(options: OffloadOptions): ResolvedOffloadOptions {
  if (options.device === undefined || options.device === null) {
    throw new OffloadConfigError('device', options.device, 'a backend to compute on is required');
  }
  if (options.offloadDevice === undefined || options.offloadDevice === null) {
    throw new OffloadConfigError(
      'offloadDevice',
      options.offloadDevice,
      'a backend to keep the model on is required',
    );
  }
  if (options.offloadDevice === options.device) {
    throw new OffloadConfigError(
      'offloadDevice',
      options.offloadDevice.kind,
      'must be a different backend from device',
    );
  }
  return Object.freeze({
    device: options.device,
    offloadDevice: options.offloadDevice,
    numSlices: positiveInteger('numSlices', options.numSlices ?? 3),
    checkpointActivation: options.checkpointActivation ?? false,
    numMicrobatches: positiveInteger('numMicrobatches', options.numMicrobatches ?? 1),
    prefetch: options.prefetch ?? true,
    optimizerOnDevice: options.optimizerOnDevice ?? false,
  });
}
