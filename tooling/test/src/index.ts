import { defineProject, type UserWorkspaceConfig } from 'vitest/config';

/**
 * The shared vitest project for a package. Tests read sibling packages from source through the
 * `@webshard/source` export condition, so a fresh clone tests without a build.
 */
export function definePackageTestConfig(name: string, overrides: UserWorkspaceConfig['test'] = {}) {
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
