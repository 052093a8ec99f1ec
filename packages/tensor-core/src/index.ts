export type {
  AdamHyper,
  Backend,
  BackendCapabilities,
  BackendKind,
  BinaryOp,
  KernelTensor,
  RawStorage,
  ReduceOp,
  SgdHyper,
  StridedOperand,
  UnaryOp,
} from './backend/backend.js';
export { bytesPerElement, DTYPES, hostArrayFor, isFloatDType } from './dtype.js';
export type { DType, HostArray } from './dtype.js';
export {
  bf16BitsToF32,
  bitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToBits,
  f32ToF16Bits,
  roundToDType,
} from './dtype-convert.js';
export {
  ArgumentError,
  BackendError,
  DTypeError,
  FreedTensorError,
  IndexError,
  NoAdapterError,
  OutOfMemoryError,
  ShapeError,
  StateError,
  WebshardError,
} from './errors.js';
export {
  DEFAULT_CHUNK_BYTES,
  decodeSafetensors,
  encodeSafetensors,
  loadSafetensors,
  readSafetensorsHeader,
  saveSafetensors,
} from './io/safetensors.js';
export type {
  LoadSafetensorsOptions,
  SafetensorsContents,
  SaveSafetensorsOptions,
} from './io/safetensors.js';
export { SafetensorsError, safetensorsDType } from './io/safetensors-format.js';
export type { SafetensorsEntry, SafetensorsHeader } from './io/safetensors-format.js';
export { CachingAllocator, sizeClass } from './memory/caching-allocator.js';
export type { Block, BufferFactory, MemoryStats } from './memory/caching-allocator.js';
export { keep, tidy } from './scope.js';
export { checkShape, shapeSize, Storage, Tensor, toHostArray } from './tensor.js';
export type { GradNodeLike } from './tensor.js';
