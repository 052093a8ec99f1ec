import type { ProcessGroup } from '@webshard/collectives';
import { type Backend, type DType, keep, Tensor } from '@webshard/tensor-core';
import { tensorFromHostArray } from '@webshard/tensor-core/backend';

/**
 * [Note: flat buffers in registered memory]
 * On host data (the CPU backend) and a group whose `allocate` hands out registered memory (the
 * `shm` world group, `tcp` with more than one rank), a unit's buffers that collectives touch live
 * there: the FP32 shard (the all-gather's input, or the cast's source under mixed precision), the
 * gathered full buffer (its output), the flat gradient and its pre-divided or widened copy (the
 * reduce-scatter's input), the reduce-scatter's output and the sharded gradient. Collectives then
 * run on them in place: on `shm` every rank writes its shard straight into the others' full
 * buffers and reduces its shard straight from every rank's flat gradient, with no round through
 * the arena's slots; on `tcp` the reduce-scatter reads its input in place and writes its output
 * directly (the all-gather receives into its output either way). The group's
 * `stagingStats().stagedOps` stays 0 across a step, which the shm and tcp parity tests assert.
 *
 * The buffers are CPU tensors over the registered arrays (`tensorFromHostArray`), so the module
 * computes on them as on any tensor; each is given back to the group (`group.free`) when the last
 * reference to its storage goes, not when FSDP drops its own: a parameter view or an activation
 * that autograd saved may still read a full buffer after the unit resharded, and the memory must
 * not come back as another unit's buffer before that reader is gone. Registered memory is outside
 * the backend's allocator: `memoryStats()` counts it as `externalBytes`, and an emulated
 * `memoryLimit` covers it beside the allocator's bytes ([Note: the limit covers external memory]
 * in tensor-core). Elsewhere (other backends, `local`, `ws`, one rank) the buffers
 * are the backend's ordinary tensors. `zeroed` asks for zeros (the flat gradient autograd
 * accumulates into); otherwise the contents are undefined, as `Tensor.empty`'s.
 */
export function flatBuffer(
  group: ProcessGroup,
  backend: Backend,
  count: number,
  dtype: DType,
  zeroed = false,
): Tensor {
  if (
    backend.kind !== 'cpu' ||
    !group.allocatesRegistered ||
    (dtype !== 'f32' && dtype !== 'f16' && dtype !== 'bf16')
  ) {
    const buffer = keep(Tensor.empty(backend, [count], dtype));
    if (zeroed) backend.fill(buffer.kernel('flatBuffer'), 0);
    return buffer;
  }
  // Registered memory comes zeroed (`ProcessGroup.allocate`), cleared at memset speed; a second
  // clear from JavaScript here would store to shared memory an element at a time ([Note: zeroing
  // shared memory] in collectives).
  const array = group.allocate(dtype, count);
  try {
    return keep(tensorFromHostArray(backend, array, { dtype, onRelease: () => group.free(array) }));
  } catch (error) {
    // Past an emulated limit the backend refuses it: the memory goes back to the group.
    group.free(array);
    throw error;
  }
}
