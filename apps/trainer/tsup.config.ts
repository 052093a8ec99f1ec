import { definePackageConfig } from '@webshard/build';
import { defineConfig } from 'tsup';

// The CLI and the worker-thread rank are entries of their own (ranks/start-ranks.ts starts them);
// `shims` gives the CommonJS build an `import.meta.url`, which the CLI uses to find the corpus that
// ships in `data/` and the ranks use to find those entries.
export default defineConfig({
  ...definePackageConfig({
    entry: { cli: 'src/cli.ts', 'rank-worker': 'src/ranks/rank-worker.ts' },
  }),
  shims: true,
});
