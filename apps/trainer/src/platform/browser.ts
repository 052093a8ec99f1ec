// `#platform` for the browser bundle of the rank loop (ranks/browser-page.ts): what a tab cannot do
// throws `NodeRequiredError`. See [Note: the trainer's platform module] in ./node.ts.
import { NodeRequiredError } from '@webshard/tensor-core';
import type * as NodePlatform from './node.js';
import { opfsOuterStateStore } from './opfs-outer-state.js';

const noFiles = (what: string) => () => {
  throw new NodeRequiredError(
    'webshard-train',
    `${what}: a browser rank reads and writes no files (rank 0, a Node process, writes the run's outputs)`,
  );
};
const noFilesAsync = (what: string) => async () => noFiles(what)();

/**
 * A tab keeps DiLoCo's global copy and outer momentum in its origin private file system, not in
 * its memory ([Note: the outer state in a store] in @webshard/diloco).
 */
export const outerStateStore: typeof NodePlatform.outerStateStore = opfsOuterStateStore;
/** Nothing to check in a tab: the Node process that served the page checked the run's files. */
export const checkFiles: typeof NodePlatform.checkFiles = async () => {};
/** Unknown in a page (a tab's memory is the browser's): the estimate checks the device limit only. */
export const freeHostMemory: typeof NodePlatform.freeHostMemory = () => Number.POSITIVE_INFINITY;
/** A name for the shipped corpus in a tab's lines; its bytes come through `RunIO.loadData`. */
export const DEFAULT_CORPUS_PATH: typeof NodePlatform.DEFAULT_CORPUS_PATH = 'data/sonnets.txt';
/** This page's id (ranks in one page share what `measureUserAgentSpecificMemory` measures). */
const pageId = Math.floor(Math.random() * 2 ** 31);
let measured: { bytes: number; peakBytes: number } | null = null;
let measuring = false;

/**
 * The page's memory from `performance.measureUserAgentSpecificMemory` (cross-origin isolated
 * pages of Chromium): the last measurement and the highest seen, or null until one is in. The
 * browser answers at its next garbage collection (seconds later), so each call starts the next
 * measurement and returns at once.
 */
export const hostMemory: typeof NodePlatform.hostMemory = async () => {
  const measure = (
    performance as { measureUserAgentSpecificMemory?: () => Promise<{ bytes: number }> }
  ).measureUserAgentSpecificMemory;
  if (typeof measure === 'function' && !measuring && globalThis.crossOriginIsolated === true) {
    measuring = true;
    measure
      .call(performance)
      .then(({ bytes }) => {
        measured = { bytes, peakBytes: Math.max(bytes, measured?.peakBytes ?? 0) };
      })
      .catch(() => {})
      .finally(() => {
        measuring = false;
      });
  }
  return measured === null ? null : { ...measured, processId: pageId };
};
export const joinPath: typeof NodePlatform.joinPath = (...parts) => parts.join('/');
export const loadDataset: typeof NodePlatform.loadDataset = noFilesAsync('--data');
export const writeFileAtomically: typeof NodePlatform.writeFileAtomically = noFilesAsync('outputs');
export const openLog: typeof NodePlatform.openLog = noFilesAsync('--log-jsonl');
export const uplotAssets: typeof NodePlatform.uplotAssets = noFilesAsync('--report');
export const appendLog: typeof NodePlatform.appendLog = noFilesAsync('--log-jsonl');
export const resolveResume: typeof NodePlatform.resolveResume = noFilesAsync('--resume');
/** A tab trusts its browser's certificate store and listens on nothing: no TLS files. */
export const readTlsFiles: typeof NodePlatform.readTlsFiles = noFilesAsync('--tls-cert');
export const removePartialCheckpoints: typeof NodePlatform.removePartialCheckpoints =
  noFilesAsync('--checkpoint-dir');
export const readRunState: typeof NodePlatform.readRunState = noFilesAsync('--resume');
export const abandonCheckpoint: typeof NodePlatform.abandonCheckpoint =
  noFilesAsync('--checkpoint-every');
export const beginCheckpoint: typeof NodePlatform.beginCheckpoint =
  noFilesAsync('--checkpoint-every');
export const finishCheckpoint: typeof NodePlatform.finishCheckpoint =
  noFilesAsync('--checkpoint-every');
/** Fault points are the Node fault-injection test's ([Note: the trainer's fault points]). */
export const stepDirName: typeof NodePlatform.stepDirName = noFiles('--checkpoint-every');
export const faultPoint: typeof NodePlatform.faultPoint = () => {};
export const slowBuild: typeof NodePlatform.slowBuild = () => {};
export const checkpointFault: typeof NodePlatform.checkpointFault = () => {};
export const joinUploadLimit: typeof NodePlatform.joinUploadLimit = () => ({ holdSyncs: 0 });
export const saveFullCheckpoint: typeof NodePlatform.saveFullCheckpoint =
  noFilesAsync('--checkpoint-every');
export const loadFullOptimizer: typeof NodePlatform.loadFullOptimizer = noFilesAsync('--resume');
export const saveShardedCheckpoint: typeof NodePlatform.saveShardedCheckpoint =
  noFilesAsync('--checkpoint-every');
export const loadShardedCheckpoint: typeof NodePlatform.loadShardedCheckpoint =
  noFilesAsync('--resume');
