import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleForBrowser } from '@webshard/test-config/browser-bundle';
import { describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));
const packageRoot = dirname(here);

describe('browser bundle', () => {
  it('the root entry bundles for the browser with no Node built-in in it', async () => {
    const { nodeImports, inputs } = await bundleForBrowser(join(here, 'index.ts'), packageRoot);
    expect(nodeImports).toEqual([]);
    // `#platform` resolved to the browser file, and neither the Node file nor Dawn came along.
    expect(inputs).toContain('src/platform/browser.ts');
    expect(inputs.filter((file) => /platform\/node\.ts|\/webgpu\/index\.js/.test(file))).toEqual(
      [],
    );
    // The walk saw the package: the WebGPU backend is in the bundle.
    expect(inputs).toContain('src/backend/webgpu/webgpu-backend.ts');
  });

  it.each([
    ['entries/autograd.ts', 'src/autograd/gradcheck.ts'],
    ['entries/backend.ts', 'src/memory/caching-allocator.ts'],
    ['entries/io.ts', 'src/io/safetensors.ts'],
  ])(
    'the %s entry bundles for the browser with no Node built-in in it',
    async (entry, expected) => {
      const { nodeImports, inputs } = await bundleForBrowser(join(here, entry), packageRoot);
      expect(nodeImports).toEqual([]);
      expect(inputs).toContain(expected);
    },
  );

  it('catches a Node import (the Node file of #platform has them)', async () => {
    const { nodeImports } = await bundleForBrowser(join(here, 'platform', 'node.ts'), packageRoot);
    expect(nodeImports).toContain('src/platform/node.ts: node:fs/promises');
  });
});
