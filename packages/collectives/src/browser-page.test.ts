import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleForBrowser } from '@webshard/test-config/browser-bundle';
import { openPage, skipWithoutChromium } from '@webshard/test-config/browser-page';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initProcessGroup } from './index.js';

const here = dirname(fileURLToPath(import.meta.url));

/** What the page reports: the all-reduced values, or the error it threw. */
interface PageResult {
  values?: number[];
  error?: { name: string; message: string };
}

// Imports the browser bundle of the main entry; `join` joins a ws group and all-reduces.
const PAGE = `<!doctype html><title>collectives</title><script type="module">
import * as collectives from '/collectives.js';
window.join = async (options, values) => {
  try {
    const group = await collectives.initProcessGroup({ backend: 'ws', ...options });
    const data = new Float32Array(values);
    await group.allReduce(data).wait();
    await group.close?.();
    return { values: Array.from(data) };
  } catch (e) {
    return { error: { name: e.name, message: e.message } };
  }
};
window.ready = true;
</script>`;

type Opened = Awaited<ReturnType<typeof openPage>>;

function join_(opened: Opened, options: object, values: number[]): Promise<PageResult> {
  return opened.page.evaluate(
    ([o, v]) =>
      (window as unknown as { join(o: object, v: number[]): Promise<PageResult> }).join(o, v),
    [options, values] as const,
  );
}

/** A port that was free a moment ago (rank 0's store needs one the page can be told up front). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

describe.skipIf(skipWithoutChromium('browser-page.test.ts'))(
  'the browser bundle in headless Chromium',
  () => {
    let opened: Opened | undefined;

    beforeAll(async () => {
      const bundle = await bundleForBrowser(join(here, 'index.ts'), dirname(here));
      expect(bundle.nodeImports).toEqual([]);
      opened = await openPage({
        '/': { type: 'text/html', body: PAGE },
        '/collectives.js': { type: 'text/javascript', body: bundle.code },
      });
      await opened.page.waitForFunction(() => (window as { ready?: boolean }).ready === true);
    }, 120_000);

    afterAll(async () => {
      await opened?.close();
    });

    it('a page as rank 0 gets NodeRequiredError: a Node process must host the store', async () => {
      const options = {
        rank: 0,
        worldSize: 2,
        masterAddr: '127.0.0.1',
        masterPort: 29999,
        token: 't',
      };
      const result = await join_(opened!, options, [1]);
      expect(result.error?.name).toBe('NodeRequiredError');
      expect(result.error?.message).toContain('a Node process must host the store');
    });

    it('a page as rank 1 all-reduces with a Node rank 0 over ws', async () => {
      const port = await freePort();
      const common = {
        worldSize: 2,
        masterAddr: '127.0.0.1',
        masterPort: port,
        token: 'page-test',
      };
      const node = initProcessGroup({ backend: 'ws', rank: 0, ...common });
      const page = join_(opened!, { rank: 1, ...common }, [10, 20, 30]);
      const group = await node;
      const data = new Float32Array([1, 2, 3]);
      await group.allReduce(data).wait();
      expect(Array.from(data)).toEqual([11, 22, 33]);
      expect(await page).toEqual({ values: [11, 22, 33] });
      await group.close();
      // (Its console shows refused connections: the page dials the store until rank 0 is up.)
    }, 60_000);
  },
);
