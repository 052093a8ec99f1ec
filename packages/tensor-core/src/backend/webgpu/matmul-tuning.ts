import type { MatmulKernel, MatmulTuning } from './matmul.js';

/**
 * [Note: matmul tuning per adapter]
 *
 * The register-tiled kernel's best shape differs between the CPU adapters CI installs, because
 * they run a workgroup differently (both measured with `bench/matmul-tuning.ts`, see the README):
 * SwiftShader (Chromium's Vulkan on the CPU) compiles each invocation's unrolled vec4 code
 * as-is and gains from large per-invocation tiles, while lavapipe (Mesa's llvmpipe) runs the
 * invocations of a workgroup as the lanes of AVX registers, so an invocation's own vec4 math is
 * scalar per lane, and what counts is that the lanes of one load read neighbouring addresses
 * (B's columns strided across invocations) or one address (A's rows taken from the workgroup id,
 * which Mesa loads once for all lanes). Real GPUs get the shared-memory kernel.
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
    // vec4 loads measured 1.3-1.9x the scalar 8x8 tile (three rounds); 8x4 and 8x8 tied.
    adapter: /llvmpipe|lavapipe/i,
    name: 'lavapipe',
    tuning: {
      kernel: 'registerTiled',
      tileM: 8,
      tileN: 4,
      workgroup: [8, 8],
      columns: 'blocked',
      vectorLoads: true,
    },
  },
  {
    // Every tiling tried measured within noise of 8x8 (0.8-1.2x); vec4 loads cost nothing.
    adapter: /swiftshader/i,
    name: 'SwiftShader',
    tuning: { ...GENERIC_CPU, vectorLoads: true },
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

/** The kernel `WEBSHARD_MATMUL` forces (`tiled` or `shared`), if any. */
export function matmulKernelFromEnv(value: string | undefined): MatmulKernel | undefined {
  if (value === 'shared') return 'sharedMemory';
  if (value === 'tiled') return 'registerTiled';
  return undefined;
}
