import type { Backend } from './backend/backend.js';
import { CpuBackend } from './backend/cpu/cpu-backend.js';
import type { CpuBackendOptions } from './backend/cpu/cpu-backend-options.js';
import { ArgumentError, BackendError } from './errors.js';

/** A new CPU backend. Backends are created explicitly; importing webshard creates none. */
export function createCpuBackend(options: CpuBackendOptions = {}): CpuBackend {
  if (
    options.memoryLimit !== undefined &&
    !(Number.isFinite(options.memoryLimit) && options.memoryLimit >= 0)
  ) {
    throw new ArgumentError(
      'createCpuBackend',
      `memoryLimit ${options.memoryLimit} is not a non-negative number of bytes`,
    );
  }
  if (
    options.matmulKernel !== undefined &&
    options.matmulKernel !== 'auto' &&
    options.matmulKernel !== 'typescript'
  ) {
    throw new ArgumentError(
      'createCpuBackend',
      `matmulKernel '${String(options.matmulKernel)}' is not 'auto' or 'typescript'`,
    );
  }
  if (
    options.kernels !== undefined &&
    options.kernels !== 'auto' &&
    options.kernels !== 'typescript'
  ) {
    throw new ArgumentError(
      'createCpuBackend',
      `kernels '${String(options.kernels)}' is not 'auto' or 'typescript'`,
    );
  }
  return new CpuBackend(options);
}

let defaultBackend: Backend | undefined;

/** The backend ops use when none is given (`tensor(data)`, `zeros(shape)`). */
export function setDefaultBackend(backend: Backend | undefined): void {
  defaultBackend = backend;
}

/** The default backend; throws `BackendError` when `setDefaultBackend` was never called. */
export function getDefaultBackend(): Backend {
  if (defaultBackend === undefined) {
    throw new BackendError(
      'getDefaultBackend',
      'no default backend is set: call setDefaultBackend(createCpuBackend()) (or a WebGPU backend) first, or pass { backend } to the op',
    );
  }
  return defaultBackend;
}
