import { definePackageConfig } from '@webshard/build';
import { defineConfig } from 'tsup';

export default defineConfig(
  definePackageConfig({ entry: { 'cli/webshard-run': 'src/cli/webshard-run.ts' } }),
);
