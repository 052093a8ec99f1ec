import type { StridedOperand } from '../backend.js';
import { distinctElements, stridedExtent } from '../strided-layout.js';
import type { MatmulTuning } from './matmul.js';
import { registerTiledWgsl, tilingKey, workgroupTile } from './matmul-tiled-wgsl.js';
import { input, type Launch, output, Params } from './program.js';

/**
 * [Note: the WebGPU strided matmul]
 * Attention reads its heads as strided windows of qkv and writes its output into the merged
 * heads' layout ([Note: matmul over strided views] in ops/matmul-views.ts). Without
 * `matmulStrided` every such product went through the ops' fallback: both operands copied
 * contiguous, one matmul, the product copied (or added) back, 39 strided copies a step of the
 * default GPT that took 25 ms of lavapipe's 182 (issue 49). Here the register-tiled kernel itself
 * reads A and B through their strides (the workgroup's z index split into the batch dims) and
 * writes C through its own, adding to it when accumulating: one dispatch, no copies, and one
 * pipeline per batch rank and dtypes (accumulating is a params word: a second pipeline added 0.7 s
 * to a first step on lavapipe with Mesa's shader cache empty). It runs the fallback's matmul with
 * the same loads in the same order, so a product has the same bits (an accumulation adds C and
 * the product in f32, as the fallback's add does).
 *
 * It declines (the ops run their fallback) what one dispatch cannot do: a 16-bit output (the
 * kernel stores f32 words, and two 16-bit elements share one), an accumulation into a window that
 * names an element twice (every product must be added in batch order), more batch elements than a
 * dispatch's z dimension holds, more than `MAX_BATCH_RANK` batch dims, and the shared-memory
 * kernel of real GPUs (its tiles are staged for contiguous rows; not measured there).
 */
export const MAX_BATCH_RANK = 4;
const MAX_Z_GROUPS = 65535;

/**
 * The launch of `out = a b` (or `+=` when `accumulate`) over strided windows, or null where the
 * one dispatch cannot do it (the caller falls back).
 */
export function matmulStridedLaunch(
  tuning: MatmulTuning,
  a: StridedOperand,
  b: StridedOperand,
  out: StridedOperand,
  batch: readonly number[],
  m: number,
  k: number,
  n: number,
  accumulate: boolean,
): Launch | null {
  if (tuning.kernel !== 'registerTiled' || out.dtype !== 'f32') return null;
  const count = batch.reduce((p, d) => p * d, 1);
  if (batch.length > MAX_BATCH_RANK || count > MAX_Z_GROUPS) return null;
  const outShape = [...batch, m, n];
  if (accumulate && !distinctElements(outShape, out.strides)) return null;
  const r = batch.length;
  // A's scalars shared across a subgroup where the adapter has them ([Note: A's rows shared
  // across a subgroup]).
  const tiling = tuning.subgroupTiling ?? tuning;
  const share = tuning.subgroupTiling?.subgroupSize ?? 0;
  const [rowsPerGroup, colsPerGroup] = workgroupTile(tiling);
  const form = { batchRank: r };
  const loads = { a: false, b: false, shareA: share };
  const program = {
    name: 'matmulStrided',
    key: `matmul:strided:${tilingKey(tiling)}:${a.dtype}:${b.dtype}:r${r}:sg${share}`,
    workgroupSize: [tiling.workgroup[0], tiling.workgroup[1], 1] as const,
    dispatch: (sh: readonly number[]): [number, number, number] => [
      Math.ceil((sh[1] ?? 1) / colsPerGroup),
      Math.ceil((sh[0] ?? 1) / rowsPerGroup),
      sh[2] ?? 1,
    ],
    wgsl: () => registerTiledWgsl(a.dtype, b.dtype, false, false, tiling, loads, form),
  };
  const [as, bs, os] = [a.strides, b.strides, out.strides];
  const params = new Params().u(m).u(n).u(k).u(a.offset).u(b.offset).u(out.offset);
  params
    .u(as[r]!)
    .u(as[r + 1]!)
    .u(bs[r]!)
    .u(bs[r + 1]!)
    .u(os[r]!)
    .u(os[r + 1]!)
    .u(accumulate ? 1 : 0);
  for (const d of batch) params.u(d);
  for (const strides of [as, bs, os]) for (let d = 0; d < r; d++) params.u(strides[d]!);
  return {
    program,
    dtypes: [a.dtype, b.dtype, 'f32'],
    bindings: [
      input(a, stridedExtent([...batch, m, k], as)),
      input(b, stridedExtent([...batch, k, n], bs)),
      output(out, stridedExtent(outShape, os)),
    ],
    params: params.toArray(),
    shape: [m, n, count],
    usesError: false,
  };
}
