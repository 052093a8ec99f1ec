// The WGSL kernel launches the backend uses, one file per family: what each family's file holds is
// in its name (elementwise, layout, reduce, row, index, optimizer; kernel-common has the shared
// helpers).
export type { Dense } from './kernel-common.js';
export { broadcastStrides, coalesce, shapeSize } from './kernel-common.js';
export type { BroadcastOperand } from './elementwise-kernels.js';
export {
  axpyLaunch,
  binaryLaunch,
  copyLaunch,
  fillLaunch,
  unaryLaunch,
  whereLaunch,
} from './elementwise-kernels.js';
export type { Strided } from './layout-kernels.js';
export { copyStridedLaunch } from './layout-kernels.js';
export { runReduce } from './reduce-kernels.js';
export { layerNormBackwardLaunches, layerNormLaunch, softmaxLaunch } from './row-kernels.js';
export {
  checkFiniteLaunch,
  crossEntropyLaunch,
  ERROR_CODE,
  gatherLaunch,
  scatterAddLaunch,
} from './index-kernels.js';
export type { AdamScalars, SgdScalars } from './optimizer-kernels.js';
export { adamLaunch, sgdLaunch } from './optimizer-kernels.js';
