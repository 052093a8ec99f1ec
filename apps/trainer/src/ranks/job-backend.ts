import { gatherScalar, type ProcessGroup } from '@webshard/collectives';
import type { Backend, BackendKind } from '@webshard/tensor-core';
import { DEFAULT_CORPUS_PATH, loadDataset } from '#platform';
import type { TrainConfig } from '../config.js';
import { BackendMismatchError } from '../errors.js';

/**
 * [Note: one backend for the job]
 * Every rank of a job trains on the same backend, chosen once and printed once. `--backend
 * cpu|webgpu` is that choice; `auto` is decided by the process that starts the ranks, with the
 * probe of [Note: the trainer's default backend] on the run's model at one rank's micro-batch,
 * before any rank starts: worker threads (`shm`) get it in their job, processes (`tcp`, `ws`) as
 * `--backend <kind>` after the user's flags. Ranks that `webshard-run` started (no trainer above
 * them) take rank 0's decision, sent to the others over the group. Left to itself, a rank would
 * call `createBackend({ kind: 'auto' })`, which takes WebGPU wherever an adapter exists: on a
 * machine with lavapipe that is about 10x slower than the CPU backend for the default model
 * (issue 38). Each rank checks, once its backend exists, that every rank has the same kind
 * (`BackendMismatchError` otherwise), and rank 0 says so on its `backend:` line.
 */

/** The backend kinds as numbers, for a collective. */
const KINDS: readonly BackendKind[] = ['cpu', 'webgpu'];

/** What deciding needs: the CLI's `chooseBackendKind` (backend-choice.ts), printing where it should. */
export type DecideBackend = (config: TrainConfig, vocabSize: number) => Promise<BackendKind>;

/** The run's vocabulary size as `train` computes it (the data's, unless --vocab-size). */
export async function jobVocabSize(config: TrainConfig): Promise<number> {
  if (config.vocabSize !== null) return config.vocabSize;
  if (config.model !== 'gpt') return 0;
  return (await loadDataset(config.data ?? DEFAULT_CORPUS_PATH, config.blockSize)).vocabSize;
}

/** `config` with `--backend` decided for the whole job (the process that starts the ranks). */
export async function decideJobBackend(
  config: TrainConfig,
  decide: DecideBackend,
): Promise<TrainConfig> {
  if (config.backend !== 'auto') return config;
  return { ...config, backend: await decide(config, await jobVocabSize(config)) };
}

/** Ranks without a trainer above them: rank 0 decides, and every rank takes its kind. */
export async function agreeOnJobBackend(
  config: TrainConfig,
  group: ProcessGroup,
  decide: DecideBackend,
): Promise<TrainConfig> {
  if (config.backend !== 'auto') return config;
  const mine =
    group.rank === 0 ? KINDS.indexOf(await decide(config, await jobVocabSize(config))) : 0;
  const decided = (await gatherScalar(group, mine))[0]!;
  return { ...config, backend: KINDS[decided]! };
}

/**
 * Every rank's backend kind, checked equal (a `BackendMismatchError` naming each rank's kind
 * otherwise); a collective, so every rank of `group` calls it once.
 */
export async function checkSameBackend(group: ProcessGroup, backend: Backend): Promise<void> {
  const codes = await gatherScalar(group, KINDS.indexOf(backend.kind));
  const kinds = codes.map((code) => KINDS[code] ?? `unknown (${code})`);
  if (kinds.some((kind) => kind !== kinds[0])) throw new BackendMismatchError(kinds);
}
