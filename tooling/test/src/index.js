// Plain JavaScript with a declaration file beside it: vitest loads package configs with Node, which
// does not run TypeScript from node_modules.
import { defineProject } from 'vitest/config';

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
