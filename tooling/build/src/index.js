// Plain JavaScript with a declaration file beside it: tsup loads its config with Node, which does
// not run TypeScript from node_modules.

/**
 * The one build every package uses: ESM and CJS with declarations, for Node 20 and browsers.
 * Dependencies are never bundled; tsup reads them from the package's package.json.
 * @param {import('./index.js').PackageBuildOptions} [options]
 * @returns {import('tsup').Options}
 */
export function definePackageConfig(options = {}) {
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
