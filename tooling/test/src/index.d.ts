import type { UserWorkspaceConfig } from 'vitest/config';

/** The shared vitest project for a package, reading sibling packages from source. */
export function definePackageTestConfig(
  name: string,
  overrides?: UserWorkspaceConfig['test'],
): UserWorkspaceConfig;
