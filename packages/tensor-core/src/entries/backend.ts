// The `@webshard/tensor-core/backend` entry: what a backend implements and what code that works
// below tensors uses (the kernel contract, the backend classes, memory, dtype bits, Philox, fused
// in-place steps). See [Note: the public surface] in index.ts.
export type {
  AdamHyper,
  BackendCapabilities,
  BinaryOp,
  KernelTensor,
  RawStorage,
  RecordedWork,
  ReductionOp,
  SgdHyper,
  StridedOperand,
  UnaryOp,
  WorkRecorder,
} from '../backend/backend.js';
export { CpuBackend } from '../backend/cpu/cpu-backend.js';
export { isCpuAdapter } from '../backend/webgpu/gpu-runtime.js';
export type { AdapterOptions } from '../backend/webgpu/gpu-runtime.js';
export type { MatmulKernel, MatmulTuning, SubgroupTiling } from '../backend/webgpu/matmul.js';
export { WebGpuBackend } from '../backend/webgpu/webgpu-backend.js';
export type { F16Storage } from '../backend/webgpu/webgpu-backend.js';
export { hostArrayFor } from '../dtype.js';
export {
  bf16BitsToF32,
  bitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToBits,
  f32ToF16Bits,
  roundToDType,
} from '../dtype-convert.js';
export type { ExternalArray } from '../external.js';
export { hostArrayOf, tensorFromHostArray } from '../external.js';
export { CachingAllocator, sizeClass } from '../memory/caching-allocator.js';
export type { Block, BufferFactory, MemoryStats } from '../memory/caching-allocator.js';
export { moveTensors_ } from '../move.js';
export { adamStep, axpy_, checkFinite, createFull, sgdStep } from '../ops/index.js';
export {
  isValidCounter,
  mulHi32,
  philox4x32,
  philoxNormal,
  philoxUniform,
  splitU64,
} from '../random/philox.js';
export { TensorStorage } from '../storage.js';
export { checkShape, shapeSize, toHostArray } from '../tensor.js';
