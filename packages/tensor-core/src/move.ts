import type { Backend, KernelTensor } from './backend/backend.js';
import type { HostArray } from './dtype.js';
import { FreedTensorError, SharedStorageError } from './errors.js';
import { TensorStorage } from './storage.js';
import type { Tensor } from './tensor.js';

/**
 * [Note: moving tensors between backends in place]
 * `tensor.to(backend)` makes a new tensor, which breaks every place that knows the old object: the
 * optimizer's state map, a module's parameter list, and the autograd nodes that saved a parameter
 * by reference. `moveTo_(backend)` / `moveTensors_(tensors, backend)` move the storage instead: the
 * tensor object stays (id, name, `requiresGrad`, hooks, its AccumulateGrad node, its optimizer
 * state), and afterwards its `backend` and storage are on the target. This is how an offloaded
 * model streams a slice's parameters to the device and back.
 * - Autograd: nodes keep parameters (and other leaves that require grad) by reference and read
 *   their storage when backward runs ([Note: saved tensors]), so a recorded graph follows the move:
 *   move a parameter back to the device before the nodes that read it run (a tensor hook on the
 *   slice's output, or before the nested backward of a checkpoint). The gradient formulas compute
 *   on the parameter's backend of that moment, so it must then be the backend of the gradients
 *   flowing in (else the op throws `BackendError`).
 * - `.grad` moves along with its tensor, so a leaf and its gradient stay on one backend, as the
 *   engine's accumulation needs. To keep a gradient where it is, take it off first
 *   (`const g = p.grad; p.grad = null`).
 * - Memory: the new storage comes from the target backend's caching allocator and the old
 *   reference is released to the source's, so each side's `memoryStats()` accounts the tensor
 *   where it lives. Both copies exist while the elements are in flight.
 * - Views: every holder of a storage must move together. A storage is moved once, with the same
 *   byte size and element offsets, so views into a flat buffer stay views into one (moved) flat
 *   buffer. If the storage has a holder outside the move (a view, the flat buffer, a tensor that
 *   autograd retained for backward), the move throws `SharedStorageError` before changing
 *   anything. Only the elements the moving tensors cover are copied; the rest of the new storage
 *   is uninitialized.
 * - Order: all reads start at once (downloads overlap), the target storage is allocated and
 *   written after they all arrive, and the tensors are repointed in one synchronous step. Until
 *   the returned promise resolves the tensors are unchanged and must not be written. If a read or
 *   an allocation fails, nothing has changed.
 */

/** One storage on the move and the tensors over it. */
interface StorageMove {
  readonly source: TensorStorage;
  readonly tensors: Tensor[];
}

function planMoves(op: string, tensors: readonly Tensor[], backend: Backend): StorageMove[] {
  const all = new Set<Tensor>();
  for (const t of tensors) {
    all.add(t);
    if (t.grad !== null) all.add(t.grad);
  }
  const byStorage = new Map<TensorStorage, Tensor[]>();
  for (const t of all) {
    if (t.isFreed) throw new FreedTensorError(op, t.name);
    if (t.backend === backend) continue;
    const storage = t.storage(op);
    const list = byStorage.get(storage);
    if (list === undefined) byStorage.set(storage, [t]);
    else list.push(t);
  }
  const moves: StorageMove[] = [];
  for (const [source, list] of byStorage) {
    checkHolders(op, source, list);
    moves.push({ source, tensors: list });
  }
  return moves;
}

function checkHolders(op: string, storage: TensorStorage, tensors: readonly Tensor[]): void {
  if (storage.refCount !== tensors.length) {
    throw new SharedStorageError(op, tensors[0]!.name, storage.refCount, tensors.length);
  }
}

/** The parts of a storage to copy: one span when every tensor has one dtype, else each tensor. */
function regions(tensors: readonly Tensor[]): Omit<KernelTensor, 'storage'>[] {
  const dtype = tensors[0]!.dtype;
  if (tensors.some((t) => t.dtype !== dtype)) {
    return tensors.map((t) => ({ offset: t.offset, dtype: t.dtype, shape: [t.size] }));
  }
  let lo = Number.POSITIVE_INFINITY;
  let hi = 0;
  for (const t of tensors) {
    lo = Math.min(lo, t.offset);
    hi = Math.max(hi, t.offset + t.size);
  }
  return hi > lo ? [{ offset: lo, dtype, shape: [hi - lo] }] : [];
}

/**
 * Move `tensors` (and their `.grad`) to `backend` in place; see [Note: moving tensors between
 * backends in place]. Tensors already on `backend` are left alone. Throws `FreedTensorError` for a
 * freed tensor and `SharedStorageError` when a storage has holders outside the move, before
 * anything changes; `OutOfMemoryError` from the target's allocator leaves everything as it was.
 */
export async function moveTensors_(tensors: readonly Tensor[], backend: Backend): Promise<void> {
  const op = 'moveTo_';
  const moves = planMoves(op, tensors, backend);
  if (moves.length === 0) return;
  const parts = moves.map((m) => regions(m.tensors));
  const data: HostArray[][] = await Promise.all(
    moves.map((m, i) =>
      Promise.all(parts[i]!.map((r) => m.source.backend.read({ storage: m.source.raw, ...r }))),
    ),
  );
  const targets: TensorStorage[] = [];
  try {
    moves.forEach((m, i) => {
      checkHolders(op, m.source, m.tensors);
      const target = TensorStorage.allocate(backend, m.source.raw.byteSize);
      targets.push(target);
      parts[i]!.forEach((r, j) => {
        backend.write({ storage: target.raw, ...r }, data[i]![j]!);
      });
    });
  } catch (error) {
    for (const target of targets) target.release();
    throw error;
  }
  moves.forEach((m, i) => {
    const target = targets[i]!;
    m.tensors.forEach((t, j) => {
      t.rebindStorage(j === 0 ? target : target.retain(), t.offset);
    });
  });
}
