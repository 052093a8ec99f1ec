import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      'packages/*/vitest.config.ts',
      'apps/*/vitest.config.ts',
      'tooling/bench/vitest.config.ts',
      'tooling/docs/vitest.config.ts',
    ],
    // Two cores: WebGPU on SwiftShader and multi-rank tests are CPU-bound, more workers only thrash.
    maxWorkers: 2,
    minWorkers: 1,
  },
});
