import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleForBrowser } from '@webshard/test-config/browser-bundle';
import { describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));
const packageRoot = dirname(here);

describe('browser bundle', () => {
  it('the main entry bundles for the browser with no Node built-in in it', async () => {
    const { nodeImports, inputs } = await bundleForBrowser(join(here, 'index.ts'), packageRoot);
    expect(nodeImports).toEqual([]);
    // Both packages' `#platform` resolved to their browser files; no Node-only module came along.
    expect(inputs).toContain('src/platform/browser.ts');
    expect(inputs).toContain('../tensor-core/src/platform/browser.ts');
    const nodeOnly = inputs.filter((file) =>
      /platform\/node\.ts|store-server|tcp-transport|local-address|ws-node|launcher|launch-threads/.test(
        file,
      ),
    );
    expect(nodeOnly).toEqual([]);
    // What a page uses is in it: the process group, the ws transport and the store client.
    expect(inputs).toContain('src/process-group.ts');
    expect(inputs).toContain('src/transports/ws/ws-transport.ts');
    expect(inputs).toContain('src/rendezvous/store-client.ts');
  });

  it('the transports entry bundles for the browser with no Node built-in in it', async () => {
    const { nodeImports, inputs } = await bundleForBrowser(
      join(here, 'entries', 'transports.ts'),
      packageRoot,
    );
    expect(nodeImports).toEqual([]);
    expect(inputs).toContain('src/transports/shm/join-shm.ts');
  });

  it('catches Node imports (the node entry has them)', async () => {
    const { nodeImports } = await bundleForBrowser(join(here, 'entries', 'node.ts'), packageRoot);
    expect(nodeImports).toContain('src/transports/shm/launch-threads.ts: node:worker_threads');
  });
});
