import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleForBrowser } from '@webshard/test-config/browser-bundle';
import { describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));

describe('the browser rank page bundle', () => {
  it('holds the rank loop (train.ts, run/, strategy/prepare.ts) and no Node built-in', async () => {
    const { nodeImports, inputs } = await bundleForBrowser(
      join(here, 'ranks/browser-page.ts'),
      dirname(here),
    );
    expect(nodeImports).toEqual([]);
    for (const file of [
      'train.ts',
      'run/set-up.ts',
      'run/loop.ts',
      'run/finish.ts',
      'strategy/prepare.ts',
      'train-step.ts',
      'platform/browser.ts',
    ]) {
      expect(inputs).toContain(`src/${file}`);
    }
    // File io stays in Node: the browser `#platform` file stands in for these.
    const nodeOnly = inputs.filter((file) =>
      /platform\/node\.ts|atomic-write|run-checkpoint|check-files|read-dataset|preflight|fsdp\/src\/checkpoint/.test(
        file,
      ),
    );
    expect(nodeOnly).toEqual([]);
  });
});
