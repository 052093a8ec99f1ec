import { definePackageConfig } from '@webshard/build';
import { defineConfig } from 'tsup';

// The CLI and the worker-thread rank are entries of their own (ranks/start-ranks.ts starts them);
// `shims` gives the CommonJS build an `import.meta.url`, which the CLI uses to find the corpus that
// ships in `data/` and the ranks use to find those entries. `#platform` stays an import, resolved
// by package.json to the Node file ([Note: the trainer's platform module]); shared code goes in
// common chunks so both entries use one copy of each class. The second build is the page a
// browser tab runs as a rank (ranks/page-bundle.ts serves it): one ES module with every package
// in it, built with the `browser` condition.
export default defineConfig([
  {
    ...definePackageConfig({
      entry: {
        cli: 'src/cli.ts',
        'report-cli': 'src/report-cli.ts',
        browser: 'src/browser.ts',
        'rank-worker': 'src/ranks/rank-worker.ts',
        'platform/node': 'src/platform/node.ts',
        'platform/browser': 'src/platform/browser.ts',
      },
      external: ['#platform', 'esbuild'],
    }),
    shims: true,
    splitting: true,
  },
  {
    entry: { 'browser-rank': 'src/ranks/browser-page.ts' },
    format: ['esm'],
    platform: 'browser',
    target: 'es2022',
    noExternal: [/.*/],
    dts: false,
    clean: false,
    // One file: the page server serves it alone, so dynamic imports are inlined, not chunks.
    splitting: false,
    sourcemap: false,
    // The app's page bundles every package from source: it is built beside them, not installed.
    esbuildOptions(options) {
      options.conditions = ['@webshard/source'];
    },
  },
]);
