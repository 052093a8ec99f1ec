import type { MatmulKernel, MatmulTuning } from './matmul.js';

/**
 * [Note: matmul tuning per adapter]
 *
 * The register-tiled kernel's best shape differs between the CPU adapters CI installs, because
 * they run a workgroup differently (both measured with `bench/matmul-tuning.ts`, see the README):
 * SwiftShader (Chromium's Vulkan on the CPU) compiles each invocation's unrolled vec4 code
 * as-is and gains from large per-invocation tiles. lavapipe (Mesa's llvmpipe) runs the
 * invocations of a workgroup as the lanes of AVX registers, and each load an invocation makes costs
 * about the same whether its lanes read one address, neighbouring addresses or scattered ones
 * (`bench/matmul-tuning.ts`, 2026-11-23: with a column per lane, 8 rows and 1 or 2 columns per
 * invocation ran at 1.19 and 2.22 GFLOP/s, in proportion to multiply-adds per load, 8/9 and
 * 16/10, although the second's row loads are one address for every lane), so what counts there is
 * multiply-adds per load: the 16x16 tile with vec4 loads makes 32 loads per 1024 multiply-adds
 * (the 8x4 tile, 12 per 128), and measured 1.0-1.6x the 8x4 tile from n = 64 to 1024 (1.5-2.0x
 * at n = 1024). But LLVM takes 15-17 s to compile each of its pipelines on lavapipe (2 cores,
 * Mesa's shader cache empty, as on a fresh machine), against 1.7-2.2 s for 8x4 (8x8: 2.8-3.4,
 * 16x8: 6-8): a training step needs several matmul pipelines, so a user's first step would wait
 * minutes, and a fresh CI machine's tests timed out. So the table keeps 8x4, and the 16x16 tile is
 * there for long runs of large matmuls through `createWebGpuBackend({ matmulTuning })`. The
 * adapter's arithmetic would allow far more: a shader that only multiplies and adds in registers
 * runs at about 34 GFLOP/s on lavapipe on 2 cores (`bench/adapter-peak.ts`), against 2.3-3.4 on
 * SwiftShader. What gets nearer to it without a larger tile: A's loads shared across a subgroup
 * (each row's `subgroupTiling`, [Note: A's rows shared across a subgroup]), 2.6-5.0x faster than
 * the 8x4 tile on lavapipe. Real GPUs get the shared-memory kernel.
 *
 * The table below is keyed by the adapter's info (vendor, architecture, device, description):
 * the first row whose pattern matches wins. `WEBSHARD_MATMUL=tiled|shared` and the backend's
 * `matmulKernel` option still force a kernel (the tiled one with the table's tiling for the
 * adapter, or the generic CPU row when the adapter is a GPU).
 */
export interface MatmulTuningRow {
  /** Matched against the adapter's info text, case-insensitively. */
  readonly adapter: RegExp;
  /** A name for logs and bench rows. */
  readonly name: string;
  readonly tuning: MatmulTuning;
}

const GENERIC_CPU: MatmulTuning = {
  kernel: 'registerTiled',
  tileM: 8,
  tileN: 8,
  workgroup: [8, 8],
  columns: 'blocked',
};

export const MATMUL_TUNING_TABLE: readonly MatmulTuningRow[] = [
  {
    // vec4 loads measured 1.3-1.9x the scalar 8x8 tile; 16x16 runs up to 2x faster still but
    // takes 15-17 s to compile per pipeline (see the Note). A shared across the subgroup of 8:
    // 2.6-5.0x faster than the 8x4 tile ([Note: A's rows shared across a subgroup]).
    adapter: /llvmpipe|lavapipe/i,
    name: 'lavapipe',
    tuning: {
      kernel: 'registerTiled',
      tileM: 8,
      tileN: 4,
      workgroup: [8, 8],
      columns: 'blocked',
      vectorLoads: true,
      subgroupTiling: {
        subgroupSize: 8,
        tileM: 16,
        tileN: 4,
        workgroup: [8, 1],
        columns: 'blocked',
      },
    },
  },
  {
    // Every tiling tried measured within noise of 8x8 (0.8-1.2x); vec4 loads cost nothing. A
    // shared across the subgroup of 4: 1.6-1.8x faster than 8x8.
    adapter: /swiftshader/i,
    name: 'SwiftShader',
    tuning: {
      ...GENERIC_CPU,
      vectorLoads: true,
      subgroupTiling: {
        subgroupSize: 4,
        tileM: 8,
        tileN: 4,
        workgroup: [4, 1],
        columns: 'blocked',
      },
    },
  },
  { adapter: /warp|software|cpu/i, name: 'other CPU adapter', tuning: GENERIC_CPU },
  { adapter: /(?:)/, name: 'GPU', tuning: { kernel: 'sharedMemory' } },
];

/** The adapter's info as one line of text, as the table's patterns see it. */
export function adapterInfoText(info: Partial<GPUAdapterInfo> | undefined): string {
  return `${info?.vendor ?? ''} ${info?.architecture ?? ''} ${info?.device ?? ''} ${info?.description ?? ''}`;
}

/**
 * The matmul tuning for an adapter: the table's row for its info, unless `force` (the
 * `matmulKernel` option or `WEBSHARD_MATMUL`) names a kernel.
 */
export function matmulTuningFor(
  info: Partial<GPUAdapterInfo> | undefined,
  force?: MatmulKernel,
): { tuning: MatmulTuning; row: string } {
  const text = adapterInfoText(info);
  const row = MATMUL_TUNING_TABLE.find((r) => r.adapter.test(text)) as MatmulTuningRow;
  if (force === undefined || force === row.tuning.kernel)
    return { tuning: row.tuning, row: row.name };
  if (force === 'sharedMemory') return { tuning: { kernel: 'sharedMemory' }, row: 'forced shared' };
  return { tuning: GENERIC_CPU, row: 'forced tiled' };
}

/**
 * The tuning a device can run: without its subgroup tiling where the device lacks the
 * `subgroups` feature or the adapter's subgroups are not always of the tiling's size (a
 * workgroup must be exactly one subgroup).
 */
export function usableTuning(
  tuning: MatmulTuning,
  features: ReadonlySet<string>,
  info: Partial<GPUAdapterInfo> | undefined,
): MatmulTuning {
  if (tuning.kernel !== 'registerTiled' || tuning.subgroupTiling === undefined) return tuning;
  const size = tuning.subgroupTiling.subgroupSize;
  const fixed = info?.subgroupMinSize === size && info?.subgroupMaxSize === size;
  if (features.has('subgroups') && fixed) return tuning;
  const { subgroupTiling: _, ...rest } = tuning;
  return rest;
}

/** The kernel `WEBSHARD_MATMUL` forces (`tiled` or `shared`), if any. */
export function matmulKernelFromEnv(value: string | undefined): MatmulKernel | undefined {
  if (value === 'shared') return 'sharedMemory';
  if (value === 'tiled') return 'registerTiled';
  return undefined;
}
