import type { Backend } from './backend/backend.js';
import type { DType } from './dtype.js';
import type { Tensor } from './tensor.js';

/**
 * [Note: modules below the tensor]
 * `tensor.ts` imports the autograd engine (for `backward` and the hooks) and `move.ts` (for
 * `moveTo_`), so those, the autograd nodes and `scope.ts` import `Tensor` as a type only: with a
 * cycle of runtime imports, which module is evaluated first would depend on which one a user
 * imports first. What they need of the class at run time comes from here: `isTensor` is
 * `instanceof Tensor` (`Tensor` is the only class that extends `TensorBrand`), and `emptyTensor`
 * is `Tensor.empty`, bound by `Tensor`'s static block when the class is defined (before any
 * tensor exists). `pnpm check:layout` fails on a new cycle of runtime imports.
 */
export abstract class TensorBrand {}

type EmptyTensor = (backend: Backend, shape: readonly number[], dtype: DType) => Tensor;

let empty: EmptyTensor | null = null;

/** Called once, by `Tensor`'s static block. */
export function bindEmptyTensor(factory: EmptyTensor): void {
  empty = factory;
}

/** `Tensor.empty`, for the modules `tensor.ts` imports. */
export function emptyTensor(backend: Backend, shape: readonly number[], dtype: DType): Tensor {
  return empty!(backend, shape, dtype);
}

/** `value instanceof Tensor`, for the modules `tensor.ts` imports. */
export function isTensor(value: unknown): value is Tensor {
  return value instanceof TensorBrand;
}
