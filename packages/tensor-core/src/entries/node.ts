// The `@webshard/tensor-core/node` entry: the APIs that only work in Node (safetensors file io,
// the atomic file writer).
// In a `browser` bundle they throw `NodeRequiredError` ([Note: the platform module]); the bytes
// they read and write are `@webshard/tensor-core/io`'s, with `SafetensorsError`. See
// [Note: the public surface] in index.ts.
export {
  DEFAULT_CHUNK_BYTES,
  loadSafetensors,
  readSafetensorsHeader,
  saveSafetensors,
} from '../io/safetensors-file.js';
export type { LoadSafetensorsOptions, SaveSafetensorsOptions } from '../io/safetensors-file.js';
export {
  SimulatedCrash,
  syncDirectory,
  writeAtomically,
  writeBytesAtomically,
} from '../io/atomic-file.js';
export type {
  AtomicFileHandle,
  AtomicWriteOptions,
  FaultHook,
  WriteStage,
} from '../io/atomic-file.js';
