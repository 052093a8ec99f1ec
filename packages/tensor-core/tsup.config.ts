import { definePackageConfig } from '@webshard/build';
import { defineConfig } from 'tsup';

export default defineConfig(
  definePackageConfig({
    entry: { testing: 'src/testing/index.ts' },
    external: ['vitest', 'webgpu'],
  }),
);
