import type { Options } from 'tsup';

/** Options a package may add to the shared build. */
export interface PackageBuildOptions {
  /** Entry points besides `src/index.ts` (for example `{ testing: 'src/testing/index.ts' }`). */
  entry?: Record<string, string>;
  /** Modules that stay external besides the package's dependencies. */
  external?: (string | RegExp)[];
}

/** The one build every package uses: ESM and CJS with declarations, for Node 20 and browsers. */
export function definePackageConfig(options?: PackageBuildOptions): Options;
