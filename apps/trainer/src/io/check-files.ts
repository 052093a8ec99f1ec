import { join } from 'node:path';
import { checkCheckpointDir, resolveResume } from '../checkpoint/checkpoint-dir.js';
import { LATEST, readRunState } from '../checkpoint/run-checkpoint.js';
import { DEFAULT_CORPUS_PATH } from '../corpus.js';
import type { TrainConfig } from '../config.js';
import { checkInputFile, checkOutputFile } from './preflight.js';

/** Check the run's files before anything is read or written: readable inputs, writable outputs. */
export async function checkFiles(config: TrainConfig): Promise<void> {
  const dataPath = config.model === 'gpt' ? (config.data ?? DEFAULT_CORPUS_PATH) : null;
  if (dataPath !== null) await checkInputFile(dataPath, '--data');
  if (config.init !== null) await checkInputFile(config.init, '--init');
  const outputs = {
    save: config.save,
    samples: config.samples,
    report: config.report,
    'log-jsonl': config.logJsonl,
  };
  for (const [name, path] of Object.entries(outputs)) {
    if (path !== null) await checkOutputFile(path, `--${name}`);
  }
  const resumed =
    config.resume === null ? null : await readRunState(await resolveResume(config.resume), config);
  if (config.checkpointDir !== null) {
    await checkOutputFile(join(config.checkpointDir, LATEST), '--checkpoint-dir');
    await checkCheckpointDir(
      config.checkpointDir,
      resumed?.runId ?? null,
      config.overwriteCheckpoints,
    );
  }
}
