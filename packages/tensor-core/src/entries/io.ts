// The `@webshard/tensor-core/io` entry: safetensors as bytes, for every platform. Reading and
// writing files is `@webshard/tensor-core/node`'s. See [Note: the public surface] in index.ts.
export { decodeSafetensors, encodeSafetensors } from '../io/safetensors.js';
export type { SafetensorsContents } from '../io/safetensors.js';
export { SafetensorsError, safetensorsDType } from '../io/safetensors-format.js';
export type { SafetensorsEntry, SafetensorsHeader } from '../io/safetensors-format.js';
