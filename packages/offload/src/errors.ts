import { WebshardError } from '@webshard/tensor-core';

/**
 * The base of every error `@webshard/offload` throws. `op` is where it was detected
 * (`OffloadModel`, `forward`, `backward`, `step`); the message starts with it.
 */
export class OffloadError extends WebshardError {
  readonly op: string;
  constructor(op: string, detail: string, options: { code?: string; cause?: unknown } = {}) {
    super(`[${op}] ${detail}`, { code: options.code ?? 'E_OFFLOAD', cause: options.cause });
    this.op = op;
  }
}

/** An option or a model that `OffloadModel` cannot work with; `option` names which. */
export class OffloadConfigError extends OffloadError {
  readonly option: string;
  readonly value: unknown;
  constructor(option: string, value: unknown, detail: string) {
    super('OffloadModel', `${option}: ${detail}`, { code: 'E_OFFLOAD_CONFIG' });
    this.option = option;
    this.value = value;
  }
}

/** A batch whose first dimension `numMicrobatches` does not divide. */
export class MicrobatchError extends OffloadError {
  readonly batchSize: number;
  readonly numMicrobatches: number;
  constructor(batchSize: number, numMicrobatches: number) {
    super(
      'forward',
      `numMicrobatches ${numMicrobatches} does not divide the batch of ${batchSize} (the input's first dimension)`,
      { code: 'E_OFFLOAD_MICROBATCH' },
    );
    this.batchSize = batchSize;
    this.numMicrobatches = numMicrobatches;
  }
}

/**
 * A layer whose parameters and gradients alone need more device memory than the device's limit
 * (`Backend.setMemoryLimit`), so no slicing can run it. `layer` is its name in the model, `bytes`
 * what it needs (parameters and gradients, in the allocator's size classes), `limit` the device's.
 */
export class SliceTooLargeError extends OffloadError {
  readonly layer: string;
  readonly bytes: number;
  readonly limit: number;
  constructor(layer: string, bytes: number, limit: number) {
    super(
      'OffloadModel',
      `layer '${layer}' needs ${bytes} bytes on the device for its parameters and gradients, more than the device limit of ${limit} bytes`,
      { code: 'E_OFFLOAD_SLICE_TOO_LARGE' },
    );
    this.layer = layer;
    this.bytes = bytes;
    this.limit = limit;
  }
}
