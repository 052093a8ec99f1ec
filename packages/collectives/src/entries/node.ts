// The `@webshard/collectives/node` entry: the parts that only run in Node (they import `node:`
// modules), kept out of the main entry so that a browser can load `@webshard/collectives`.
// See [Note: the node entry] in index.ts.
export type { ElasticCoordinatorOptions } from '../elastic/coordinator.js';
export { ElasticCoordinator } from '../elastic/coordinator.js';
export type { TlsOptions } from '../rendezvous/store-server.js';
export type {
  LaunchOptions,
  ShmRankOutcome,
  ShmWorkerData,
} from '../transports/shm/launch-threads.js';
export { runShmWorker } from '../comm-worker/shm-rank-worker.js';
export { launchThreads } from '../transports/shm/launch-threads.js';
export type {
  LaunchOptions as ProcessLaunchOptions,
  LaunchResult,
  RanksAs,
} from '../launcher/launcher.js';
export { freePort, launch } from '../launcher/launcher.js';
export {
  copyWithoutNativeNoise,
  isNativeWebGpuNoise,
  runWithNativeNoiseFiltered,
} from '../cli/native-noise.js';
