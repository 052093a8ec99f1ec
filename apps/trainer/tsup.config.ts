import { definePackageConfig } from '@webshard/build';
import { defineConfig } from 'tsup';

// The CLI is a second entry; `shims` gives the CommonJS build an `import.meta.url`, which the CLI
// uses to find the corpus that ships in `data/`.
export default defineConfig({
  ...definePackageConfig({ entry: { cli: 'src/cli.ts' } }),
  shims: true,
});
