import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));

/**
 * Every module the file reaches through static value imports and re-exports (not `import type`,
 * not dynamic `import()`), following relative specifiers; returns the bare/`node:` specifiers seen
 * and the files visited.
 */
function staticGraph(entry: string): { files: Set<string>; external: string[] } {
  const files = new Set<string>();
  const external: string[] = [];
  const visit = (file: string) => {
    if (files.has(file)) return;
    files.add(file);
    const source = readFileSync(file, 'utf8');
    for (const match of source.matchAll(
      /^(?:import|export)\s+(?!type\b)[^;]*?from\s+'([^']+)'/gm,
    )) {
      const specifier = match[1]!;
      if (specifier.startsWith('.'))
        visit(resolve(dirname(file), specifier.replace(/\.js$/, '.ts')));
      else external.push(`${file.slice(here.length + 1)}: ${specifier}`);
    }
    for (const match of source.matchAll(/^import\s+'([^']+)'/gm)) {
      external.push(`${file.slice(here.length + 1)}: ${match[1]!}`);
    }
  };
  visit(entry);
  return { files, external };
}

describe('package entries', () => {
  it('the main entry reaches no Node-only module through static imports (browsers load it)', () => {
    const { files, external } = staticGraph(join(here, 'index.ts'));
    const nodeOnly = external.filter((line) => / (node:|ws$)/.test(line));
    expect(nodeOnly).toEqual([]);
    // The walk really followed the graph: the process group, the shm transport and the
    // rendezvous client are in it, tensor-core (its root and `/backend`) is its only package dependency, and the Node-only
    // modules are reached through `#platform` (browser-bundle.test.ts checks its browser side).
    expect(files.has(join(here, 'process-group.ts'))).toBe(true);
    expect(files.has(join(here, 'transports', 'shm', 'shm-transport.ts'))).toBe(true);
    expect(files.has(join(here, 'rendezvous', 'store-client.ts'))).toBe(true);
    expect(new Set(external.map((line) => line.split(': ')[1]))).toEqual(
      new Set(['@webshard/tensor-core', '@webshard/tensor-core/backend', '#platform']),
    );
  });

  it('the transports entry reaches no Node-only module through static imports either', () => {
    const { files, external } = staticGraph(join(here, 'entries', 'transports.ts'));
    expect(external.filter((line) => / (node:|ws$)/.test(line))).toEqual([]);
    expect(files.has(join(here, 'transports', 'ws', 'ws-transport.ts'))).toBe(true);
  });

  it('the walk catches a Node-only import (the node entry has them)', () => {
    const { external } = staticGraph(join(here, 'entries', 'node.ts'));
    expect(external).toContain('transports/shm/launch-threads.ts: node:worker_threads');
  });

  it('the main entry loads and exports the collectives, transports the shm join, node the launcher', async () => {
    const main = await import('./index.js');
    expect(typeof main.ProcessGroup).toBe('function');
    expect('launchThreads' in main).toBe(false);
    const transports = await import('./entries/transports.js');
    expect(typeof transports.joinShm).toBe('function');
    const node = await import('./entries/node.js');
    expect(typeof node.launchThreads).toBe('function');
    expect(typeof node.runShmWorker).toBe('function');
  });
});
