import { WebshardError } from '../errors.js';

/**
 * An autograd failure that is not a shape, dtype or freed-storage problem: an op without a gradient,
 * a backward through a graph that was already released, a hook that returned a wrong tensor.
 */
export class AutogradError extends WebshardError {
  readonly op: string;
  constructor(op: string, detail: string) {
    super(`[${op}] ${detail}`, { code: 'E_AUTOGRAD' });
    this.op = op;
  }
}
