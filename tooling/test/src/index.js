// Plain JavaScript with a declaration file beside it: vitest loads package configs with Node, which
// does not run TypeScript from node_modules.
import { defineProject } from 'vitest/config';
import { filterNativeWebGpuNoise } from './native-noise.js';

// Test logs show what the tests print, not Dawn's and Vulkan's own lines ([Note: native WebGPU
// noise] in native-noise.js). This module is loaded by the main vitest process, which receives
// every test process's stderr.
filterNativeWebGpuNoise(process.stderr);

/**
 * The shared vitest project for a package. Tests read sibling packages from source through the
 * `@webshard/source` export condition, so a fresh clone tests without a build.
 * @param {string} name
 * @param {import('vitest/config').UserWorkspaceConfig['test']} [overrides]
 */
export function definePackageTestConfig(name, overrides = {}) {
  return defineProject({
    resolve: { conditions: ['@webshard/source'] },
    ssr: { resolve: { conditions: ['@webshard/source'] } },
    test: {
      name,
      include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
      environment: 'node',
      testTimeout: 60_000,
      hookTimeout: 60_000,
      pool: 'forks',
      ...overrides,
    },
  });
}
