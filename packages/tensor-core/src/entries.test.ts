import { describe, expect, it } from 'vitest';

// [Note: the public surface] in index.ts: each name has one home among the package's entries.
describe('package entries', () => {
  it('no name is exported from two entries, and the root keeps no internals', async () => {
    const entries = {
      '.': await import('./index.js'),
      './autograd': await import('./entries/autograd.js'),
      './backend': await import('./entries/backend.js'),
      './io': await import('./entries/io.js'),
      './node': await import('./entries/node.js'),
    };
    const homes = new Map<string, string[]>();
    for (const [entry, module] of Object.entries(entries))
      for (const name of Object.keys(module)) homes.set(name, [...(homes.get(name) ?? []), entry]);
    expect([...homes].filter(([, where]) => where.length > 1)).toEqual([]);
    const root = Object.keys(entries['.']);
    for (const internal of [
      'GradNode',
      'TensorStorage',
      'CachingAllocator',
      'recordOp',
      'adamStep',
    ])
      expect(root).not.toContain(internal);
    expect(root).toEqual(
      expect.arrayContaining(['Tensor', 'tensor', 'Linear', 'AdamW', 'backward']),
    );
  });
});
