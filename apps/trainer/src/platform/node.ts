/**
 * [Note: the trainer's platform module]
 * train.ts and strategy/prepare.ts are one rank's loop, and a browser tab runs them as a rank
 * (ranks/browser-ranks.ts), so nothing they import statically may import a Node module. What a
 * rank does with files (check them, read the data, write outputs, the JSONL log and checkpoints)
 * goes through the private import `#platform`, which package.json maps to this file, and under
 * the `browser` condition to ./browser.ts, as tensor-core and collectives do ([Note: the platform
 * module] there). In a tab those throw `NodeRequiredError`: rank 0, which writes the outputs, is
 * always a Node process, the data comes through `RunIO.loadData`, and the flags that need files
 * on every rank are refused before a run with browser ranks starts (cli/browser-rank-options.ts).
 */
import { freemem } from 'node:os';
import type { OuterStateStore } from '@webshard/diloco';
import { join } from 'node:path';

export { loadShardedCheckpoint, saveShardedCheckpoint } from '@webshard/fsdp/checkpoint';
export {
  abandonCheckpoint,
  beginCheckpoint,
  finishCheckpoint,
  removePartialCheckpoints,
  resolveResume,
} from '../checkpoint/checkpoint-dir.js';
export {
  loadFullOptimizer,
  readRunState,
  saveFullCheckpoint,
  stepDirName,
} from '../checkpoint/run-checkpoint.js';
export { checkFiles } from '../io/check-files.js';
export { DEFAULT_CORPUS_PATH } from '../corpus.js';
export { loadDataset } from '../data/read-dataset.js';
export { writeFileAtomically } from '../io/atomic-write.js';
export { readUplotAssets as uplotAssets } from '../report/uplot-assets.js';
export { checkpointFault, faultPoint, joinUploadLimit, slowBuild } from '../io/fault-points.js';
export { appendLog, openLog } from '../io/resumable-log.js';
export { readTlsFiles } from '../ranks/tls-files.js';
export { join as joinPath };

/**
 * Where a Node member keeps DiLoCo's global copy and outer momentum: in memory (null), as it
 * always has; a tab's store is the origin private file system ([Note: the outer state in a store]
 * in @webshard/diloco).
 */
export async function outerStateStore(): Promise<OuterStateStore | null> {
  return null;
}

/** The host's free memory in bytes, for the estimate's check (models/memory-estimate.ts). */
export function freeHostMemory(): number {
  return freemem();
}

/**
 * This process's resident memory (`process.memoryUsage().rss`) and its peak (the kernel's
 * `maxRSS`), in bytes, and an id shared by the ranks that run in this process (thread ranks of
 * the `shm` transport share it: the numbers are the process's, for all of them).
 */
export async function hostMemory(): Promise<HostMemory | null> {
  return {
    bytes: process.memoryUsage.rss(),
    peakBytes: Math.max(process.memoryUsage.rss(), process.resourceUsage().maxRSS * 1024),
    processId: process.pid,
  };
}

/** What `hostMemory` measures. */
export interface HostMemory {
  bytes: number;
  peakBytes: number;
  /** Equal on ranks that share the measured memory. */
  processId: number;
}
