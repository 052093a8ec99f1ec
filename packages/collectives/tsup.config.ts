import { definePackageConfig } from '@webshard/build';
import { defineConfig } from 'tsup';

export default defineConfig(
  definePackageConfig({
    entry: { 'cli/webshard-run': 'src/cli/webshard-run.ts', testing: 'src/testing/index.ts' },
    // The testing entry runs inside the user's vitest.
    external: ['vitest'],
  }),
);
