import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleForBrowser } from '@webshard/test-config/browser-bundle';
import { openPage, skipWithoutChromium } from '@webshard/test-config/browser-page';
import { describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));

const PAGE = `<!doctype html><title>opfs</title><script type="module">
const worker = new Worker('/worker.js', { type: 'module' });
worker.onmessage = (event) => { window.outcome = event.data; };
worker.onerror = (event) => { window.outcome = { error: String(event.message) }; };
</script>`;

describe.skipIf(skipWithoutChromium('opfs-store.test.ts'))(
  'OpfsStore in a worker of headless Chromium',
  () => {
    it('keeps its contract, and ssdOffload in OPFS trains as in memory bit for bit', async () => {
      const bundle = await bundleForBrowser(
        join(here, '..', 'test-support', 'opfs-worker.ts'),
        dirname(here),
      );
      expect(bundle.nodeImports).toEqual([]);
      const opened = await openPage({
        '/': { type: 'text/html', body: PAGE },
        '/worker.js': { type: 'text/javascript', body: bundle.code },
      });
      try {
        await opened.page.waitForFunction(() => (window as { outcome?: unknown }).outcome, null, {
          timeout: 60_000,
        });
        const outcome = (await opened.page.evaluate(
          () =>
            (window as unknown as { outcome: { result?: Record<string, unknown>; error?: string } })
              .outcome,
        )) as { result?: Record<string, unknown>; error?: string };
        expect(outcome.error).toBeUndefined();
        const file = 'fsdp-opfs-test/a.shard';
        expect(outcome.result).toMatchObject({
          roundTrip: true,
          stats: { bytesRead: 1000, bytesWritten: 2000, reads: 1, writes: 2 },
          wrongSize: `FsdpStorageError: [OpfsStore.read] file '${file}': holds 1000 bytes, expected 12 (a shard of another model or world size, or a damaged file)`,
          missing:
            "FsdpStorageError: [OpfsStore.read] file 'fsdp-opfs-test/never.shard': no such file (never written, or removed)",
          badKey: expect.stringContaining("FsdpStorageError: [OpfsStore.write] file '../x'"),
          removed: expect.stringContaining('no such file'),
          same: true,
        });
        const io = outcome.result!.io as { bytesRead: number; bytesWritten: number };
        expect(io.bytesRead).toBeGreaterThan(0);
        expect(io.bytesWritten).toBeGreaterThan(0);
      } finally {
        await opened.close();
      }
    }, 120_000);
  },
);
