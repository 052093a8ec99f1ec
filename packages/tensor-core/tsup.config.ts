import { definePackageConfig } from '@webshard/build';
import { defineConfig } from 'tsup';

export default defineConfig({
  ...definePackageConfig({
    entry: {
      autograd: 'src/entries/autograd.ts',
      backend: 'src/entries/backend.ts',
      io: 'src/entries/io.ts',
      node: 'src/entries/node.ts',
      'platform/browser': 'src/platform/browser.ts',
      'platform/node': 'src/platform/node.ts',
      testing: 'src/testing/index.ts',
    },
    // `#platform` stays an import in dist, so the consumer's resolver picks the Node or the
    // browser file by condition (package.json `imports`; [Note: the platform module]).
    external: ['vitest', 'webgpu', '#platform'],
  }),
  // The declarations name WebGPU's types (GPUAdapter, GPUDevice): the reference makes a consumer
  // load them from the `@webgpu/types` dependency, so they typecheck with `skipLibCheck: false`
  // (tsup drops the sources' own `/// <reference>` lines).
  dts: { banner: '/// <reference types="@webgpu/types" />' },
  // Shared chunks, so the entries (and the two `#platform` files) use one copy of Tensor and of
  // the error classes.
  splitting: true,
});
