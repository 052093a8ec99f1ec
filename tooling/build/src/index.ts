import type { Options } from 'tsup';

/** Options a package may add to the shared build. */
export interface PackageBuildOptions {
  /** Entry points besides `src/index.ts` (for example `{ testing: 'src/testing/index.ts' }`). */
  entry?: Record<string, string>;
  /** Modules that stay external besides the package's dependencies. */
  external?: string[];
}

/**
 * The one build every package uses: ESM and CJS with declarations, for Node 20 and browsers.
 * Dependencies are never bundled; tsup reads them from the package's package.json.
 */
export function definePackageConfig(options: PackageBuildOptions = {}): Options {
  return {
    entry: { index: 'src/index.ts', ...options.entry },
    format: ['esm', 'cjs'],
    dts: true,
    sourcemap: true,
    clean: true,
    target: 'es2022',
    platform: 'neutral',
    treeshake: true,
    splitting: false,
    external: [/^node:/, ...(options.external ?? [])],
  };
}
