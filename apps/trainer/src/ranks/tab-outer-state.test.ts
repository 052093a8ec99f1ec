import { skipWithoutChromium } from '@webshard/test-config/browser-page';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { cli, startCoordinator, until } from '../test-support/cli-process.js';
import { useTrainerPageBrowser } from '../test-support/trainer-page-browser.js';
import type { RankStatus } from './browser-page.js';

// [Note: the outer state in a store] in a tab, in headless Chromium: a tab and a Node member of
// an elastic diloco world (H = 4, int8). The tab keeps DiLoCo's global copy and outer momentum in
// its origin private file system (the Node member in memory), and its stored global copy is the
// Node member's bit for bit: the digest the Node member prints at the end is the stored file's.
const RUN = [
  ...['--n-layer', '1', '--n-embd', '32', '--n-head', '2', '--block-size', '16'],
  ...['--strategy', 'diloco', '--inner-steps', '4', '--outer-compression', 'int8'],
  ...['--batch-size', '12', '--steps', '24', '--backend', 'cpu'],
  ...['--sample-length', '0', '--seed', '7'],
];

interface StoredFile {
  name: string;
  bytes: number;
  /** FNV-1a over the file's bytes, as the trainer's `elastic: global digest` line. */
  digest: string;
}

/** The page's stored outer-state files, each with its size and digest. */
function storedFiles(page: Page): Promise<StoredFile[]> {
  return page.evaluate(async () => {
    const root = await navigator.storage.getDirectory();
    const files: StoredFile[] = [];
    for await (const name of (root as unknown as { keys(): AsyncIterable<string> }).keys()) {
      const file = await (await root.getFileHandle(name)).getFile();
      const bytes = new Uint8Array(await file.arrayBuffer());
      let hash = 0x811c9dc5;
      for (const byte of bytes) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
      files.push({ name, bytes: bytes.length, digest: hash.toString(16).padStart(8, '0') });
    }
    return files;
  });
}

function statusOf(page: Page): Promise<RankStatus | undefined> {
  return page.evaluate(() => (window as { webshardRank?: RankStatus }).webshardRank);
}

// Skipped, with the reason printed, only where no Chromium is installed (skipWithoutChromium):
// the tab is the thing under test. CI installs Debian's chromium, so it runs there.
describe.skipIf(skipWithoutChromium('tab-outer-state.test.ts'))(
  "a tab's diloco state in its origin private file system",
  () => {
    const browser = useTrainerPageBrowser();

    it('the tab holds its global copy and momentum in 2 files of 4 bytes a parameter, the global bit for bit the Node member`s', async () => {
      const { coordinator, url } = await startCoordinator(2, 2, 5, ['--browser-port', '0', ...RUN]);
      const address = await until(
        'the tab page',
        () => /browser tabs join at (http:\/\/\S+)/.exec(coordinator.stdout())?.[1],
      );
      const node = cli([...RUN, '--transport', 'ws', '--elastic', url]);
      const page = await browser().newPage();
      await page.goto(address);
      const [member, ended] = await Promise.all([node.done, coordinator.done]);
      expect([member!.code, member!.stderr]).toEqual([0, '']);
      expect(ended!.code).toBe(0);
      let status = await statusOf(page);
      for (let i = 0; i < 600 && status?.state !== 'done' && status?.state !== 'failed'; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        status = await statusOf(page);
      }
      expect(status?.state).toBe('done');
      const digests = [...node.stdout().matchAll(/elastic: global digest (\w+)/g)];
      const last = digests.at(-1)?.[1];
      const files = await storedFiles(page);
      const global = files.filter((f) => f.name.endsWith('-global.f32'));
      const momentum = files.filter((f) => f.name.endsWith('-momentum.f32'));
      expect([global.length, momentum.length, files.length]).toEqual([1, 1, 2]);
      expect(global[0]!.bytes).toBeGreaterThan(10_000);
      expect(momentum[0]!.bytes).toBe(global[0]!.bytes);
      expect(global[0]!.digest).toBe(last);
      await page.close();
    }, 300_000);
  },
);
