// The `@webshard/tensor-core/node` entry: the APIs that only work in Node (safetensors file io).
// The root entry still exports them for existing imports, and in a `browser` bundle they throw
// `NodeRequiredError`; new Node code that reads or writes files can import them from here, which
// says in the import itself that it needs Node. See [Note: the platform module].
export {
  DEFAULT_CHUNK_BYTES,
  loadSafetensors,
  saveSafetensors,
} from './io/safetensors.js';
export type { LoadSafetensorsOptions, SaveSafetensorsOptions } from './io/safetensors.js';
