import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/** Imports one module of this package first, in a fresh process; resolves to what it printed. */
function importFirst(path: string): Promise<string> {
  const file = fileURLToPath(new URL(path, import.meta.url));
  const script = `await import(${JSON.stringify(file)}).then(() => console.log('LOADED'), (e) => console.log(e.name + ': ' + e.message));`;
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--conditions=@webshard/source', '--import', 'tsx', '--input-type=module', '-e', script],
      { timeout: 30_000 },
      (error, stdout) => (error ? reject(error) : resolve(stdout.trim())),
    );
  });
}

describe('module import order', () => {
  // node.ts -> tensor.ts -> engine.ts -> node.ts is a cycle: a class extending GradNode declared
  // in engine.ts ran before GradNode existed when one of these was the first module imported.
  it.each(['./autograd/node.ts', './nn/module.ts', './nn/containers.ts'])(
    'loads %s when it is the first module imported',
    async (path) => {
      expect(await importFirst(path)).toBe('LOADED');
    },
  );
});
