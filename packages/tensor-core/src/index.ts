export { GradScaler } from './amp/grad-scaler.js';
export type {
  GradScalerOptions,
  GradScalerStateDict,
  ScalableOptimizer,
} from './amp/grad-scaler.js';
export { MixedPrecision } from './amp/mixed-precision.js';
export type { MixedPrecisionOptions } from './amp/mixed-precision.js';
export { checkpoint, checkpointWith } from './autograd/checkpoint.js';
export type { CheckpointOptions, CheckpointResult } from './autograd/checkpoint.js';
export {
  backward,
  gradientEdge,
  isBackwardRunning,
  queueCallback,
  registerPostAccumulateGradHook,
  registerTensorHook,
} from './autograd/engine.js';
export type { BackwardOptions } from './autograd/engine.js';
export { AutogradError } from './autograd/errors.js';
export { gradcheck } from './autograd/gradcheck.js';
export type { GradcheckOptions, GradcheckResult } from './autograd/gradcheck.js';
export { gradients, reduceTo } from './autograd/gradients.js';
export { enableGrad, isGradEnabled, noGrad, setGradEnabled } from './autograd/grad-mode.js';
export type { RemovableHandle } from './autograd/hooks.js';
export { AccumulateGrad, isParameter, markParameter, GradNode } from './autograd/node.js';
export type {
  Edge,
  GradContext,
  GradientDef,
  PostAccumulateGradHook,
  TensorHook,
} from './autograd/node.js';
export { recordOp } from './autograd/record.js';
export type { OpRecord } from './autograd/record.js';
export type {
  AdamHyper,
  Backend,
  BackendCapabilities,
  BackendKind,
  BinaryOp,
  KernelTensor,
  RawStorage,
  ReductionOp,
  SgdHyper,
  StridedOperand,
  UnaryOp,
} from './backend/backend.js';
export { CpuBackend } from './backend/cpu/cpu-backend.js';
export type { CpuBackendOptions } from './backend/cpu/cpu-backend.js';
export { createBackend } from './backend/create.js';
export type { CreateBackendOptions } from './backend/create.js';
export { isCpuAdapter, webGpuLikelyAvailable } from './backend/webgpu/gpu-runtime.js';
export type { AdapterOptions } from './backend/webgpu/gpu-runtime.js';
export type { MatmulKernel } from './backend/webgpu/matmul.js';
export { createWebGpuBackend, WebGpuBackend } from './backend/webgpu/webgpu-backend.js';
export type { F16Storage, WebGpuBackendOptions } from './backend/webgpu/webgpu-backend.js';
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
  NodeRequiredError,
  OutOfMemoryError,
  ShapeError,
  SharedStorageError,
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
export { moveTensors_ } from './move.js';
export { CausalSelfAttention } from './nn/attention.js';
export type { CausalSelfAttentionOptions } from './nn/attention.js';
export { ModuleDict, ModuleList, Sequential } from './nn/containers.js';
export {
  constantInit,
  kaimingUniformBound,
  normalInit,
  uniformInit,
} from './nn/init.js';
export type { LayerOptions } from './nn/init.js';
export {
  CrossEntropyLoss,
  Dropout,
  Embedding,
  GELU,
  LayerNorm,
  Linear,
  MSELoss,
  ReLU,
} from './nn/layers.js';
export type { ForwardHook, ForwardPreHook } from './nn/module.js';
export { Module } from './nn/module.js';
export type {
  DTypeMismatch,
  FreedKey,
  ShapeMismatch,
  StateDictInput,
  StateDictProblems,
} from './nn/state-dict.js';
export { StateDictError } from './nn/state-dict.js';
export {
  abs,
  activationGrad,
  adamStep,
  add,
  arange,
  argmax,
  axpy_,
  batchedMatmul,
  broadcastTo,
  cast,
  checkFinite,
  chunk,
  clone,
  concat,
  copy_,
  createFull,
  crossEntropy,
  div,
  embedding,
  empty,
  eq,
  exp,
  expand,
  fill_,
  flatten,
  full,
  fullLike,
  ge,
  gelu,
  gt,
  indexAdd,
  layerNorm,
  le,
  log,
  logSoftmax,
  lt,
  maskedFill,
  matmul,
  max,
  maximum,
  mean,
  min,
  minimum,
  mseLoss,
  mul,
  narrow,
  ne,
  neg,
  ones,
  onesLike,
  permute,
  pow,
  rand,
  randn,
  reciprocal,
  relu,
  reshape,
  rsqrt,
  scatterAdd,
  sgdStep,
  sigmoid,
  slice,
  softmax,
  split,
  sqrt,
  square,
  squeeze,
  sub,
  sum,
  tanh,
  tensor,
  toDType,
  transpose,
  unsqueeze,
  view,
  where,
  zeros,
  zerosLike,
} from './ops/index.js';
export type {
  Axes,
  CreateOptions,
  CrossEntropyOptions,
  LayerNormOptions,
  MatmulOptions,
  NestedNumbers,
  Operand,
  RandomOptions,
  ReduceOptions,
  SliceRange,
} from './ops/index.js';
export { Adam, AdamW } from './optim/adam.js';
export type { AdamHyperparameters, AdamState } from './optim/adam.js';
export { clipGradNorm, partialNorm } from './optim/clip-grad-norm.js';
export type { ClipGradNormOptions } from './optim/clip-grad-norm.js';
export { markManagedParameter, Optimizer, zeroGrads } from './optim/optimizer.js';
export type {
  OptimizerParamState,
  OptimizerStateDict,
  ParamGroup,
  ParamGroupInput,
  StepOptions,
} from './optim/optimizer.js';
export { SGD } from './optim/sgd.js';
export type { SgdHyperparameters, SgdState } from './optim/sgd.js';
export { RandomGenerator, getDefaultGenerator, manualSeed } from './random/generator.js';
export {
  isValidCounter,
  mulHi32,
  philox4x32,
  philoxNormal,
  philoxUniform,
  splitU64,
} from './random/philox.js';
export { createCpuBackend, getDefaultBackend, setDefaultBackend } from './runtime.js';
export { keep, tidy, tidyAsync } from './scope.js';
export { TensorStorage } from './storage.js';
export { checkShape, shapeSize, Tensor, toHostArray } from './tensor.js';
export type { ExternalArray } from './external.js';
export { tensorFromHostArray } from './external.js';
export type { GradNodeLike } from './tensor.js';
