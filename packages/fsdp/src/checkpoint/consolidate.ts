import { createCpuBackend, keep, Tensor } from '@webshard/tensor-core';
import { encodeSafetensors } from '@webshard/tensor-core/io';
import { consolidateFlat } from '../state-dict.js';
import { writeFileAtomic } from './atomic-write.js';
import { readCheckpoint } from './sharded-checkpoint.js';

/**
 * Turn a sharded checkpoint into one safetensors file of the full f32 parameters and the buffers,
 * under the model's names (a tied parameter once, under its first name), written atomically: what
 * PyTorch's `safetensors.torch.load_file` reads. No process group; reads the whole checkpoint.
 * Returns the names written.
 */
export async function consolidateCheckpoint(dir: string, out: string): Promise<string[]> {
  const { manifest, files } = await readCheckpoint(dir, 'consolidateCheckpoint');
  const backend = createCpuBackend();
  const tensors: Record<string, Tensor> = {};
  for (const fl of manifest.layout.flatParams) {
    const shards = await Promise.all(
      files.map(async (f) => (await f[`param/${fl.key}`]!.read()) as Float32Array),
    );
    const full = consolidateFlat(manifest.layout, fl.key, shards);
    for (const e of fl.entries) {
      const t = keep(Tensor.empty(backend, e.shape, 'f32'));
      t.write(full.subarray(e.offset, e.offset + e.numel));
      tensors[e.names[0]!] = t;
    }
  }
  for (const name of manifest.layout.buffers) tensors[name] = files[0]![`buffer/${name}`]!;
  await writeFileAtomic(out, await encodeSafetensors(tensors));
  return Object.keys(tensors);
}
