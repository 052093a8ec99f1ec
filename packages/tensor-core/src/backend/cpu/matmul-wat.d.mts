/** The register tile, cache blocks and code shape of the WASM matmul (matmul-wat.mjs). */
export interface MatmulWatOptions {
  /** Rows of A per register tile. */
  mr?: number;
  /** Columns of B per register tile, a multiple of 4. */
  nr?: number;
  /** k steps per cache block. */
  kc?: number;
  /** Rows of A per cache block, a multiple of `mr`. */
  mc?: number;
  /** k steps per trip of the register tile's loop. */
  unroll?: number;
  /** Whether `pack` copies full panels with SIMD. */
  simdPack?: boolean;
  /** How a k step broadcasts A's values. */
  splat?: 'load' | 'shuffle';
  /** Relaxed SIMD's fused multiply-add. */
  relaxed?: boolean;
  /** Import a shared memory instead of exporting an own one. */
  shared?: boolean;
}

export declare const MATMUL_DEFAULTS: Readonly<
  Required<Omit<MatmulWatOptions, 'relaxed' | 'shared'>>
>;
export declare const MAX_THREADS: number;
export declare function matmulWat(options?: MatmulWatOptions): {
  wat: string;
  scratchBytes: number;
  mr: number;
  nr: number;
};
/** `matmulWat(options)` assembled with an initialized wabt module: its bytes beside what matmulWat returns. */
export declare function assembleMatmul(
  wabt: Awaited<ReturnType<typeof import('wabt').default>>,
  options?: MatmulWatOptions,
): { wat: string; bytes: Uint8Array<ArrayBuffer>; scratchBytes: number; mr: number; nr: number };
