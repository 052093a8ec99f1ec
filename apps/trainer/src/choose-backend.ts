import { type Backend, createBackend } from '@webshard/tensor-core';
import { chooseAutoBackend, realChoiceDeps } from './cli/backend-choice.js';
import type { TrainConfig } from './config.js';

/**
 * The run's backend: `--backend cpu|webgpu` as asked, `auto` by a measured probe of the run's own
 * model on each backend ([Note: the trainer's default backend]), saying why it chose. The CLI and a
 * browser rank's page (ranks/browser-page.ts) both choose here, so a tab decides as a Node rank of
 * the same job does.
 */
export async function chooseBackend(
  config: TrainConfig,
  vocabSize: number,
  say: (text: string) => void,
): Promise<Backend> {
  const memory = config.memoryLimit === null ? {} : { memoryLimit: config.memoryLimit };
  if (config.backend !== 'auto') return createBackend({ kind: config.backend, ...memory });
  const { backend, reason } = await chooseAutoBackend(
    config,
    realChoiceDeps(config, vocabSize, memory),
  );
  say(`backend auto: ${reason} (--backend to override)\n`);
  return backend;
}

/**
 * The backend kind every rank of a job uses, decided once by the process that starts the ranks
 * ([Note: one backend for the job] in ranks/job-backend.ts): `--backend` as asked, else the probe
 * of `chooseBackend` (printed once, with `say`), whose backend is then released.
 */
export async function chooseBackendKind(
  config: TrainConfig,
  vocabSize: number,
  say: (text: string) => void,
): Promise<'cpu' | 'webgpu'> {
  if (config.backend !== 'auto') return config.backend;
  const backend = await chooseBackend(config, vocabSize, say);
  const kind = backend.kind;
  backend.dispose();
  return kind;
}
