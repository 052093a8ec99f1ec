// Plain JavaScript with a declaration file beside it, like browser-page.js.
//
// [Note: timing tabs without the DevTools protocol]
// A page driven through the DevTools protocol (playwright, puppeteer) has the protocol's Network
// domain enabled, and Chromium then reports every WebSocket frame to the driver with its payload,
// base64 in JSON: a tab receiving 16 MiB in one message measured 6-8 MB/s that way, 150-220 MB/s
// with no driver attached (the same machine and minute). Timings of a tab's own data path must
// come from a Chromium started without one: `openTabs` starts headless Chromium on the pages'
// URLs and takes each page's result from a POST, with no protocol at all.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findChromium } from './browser-page.js';

/**
 * Serves `files` from 127.0.0.1 and opens `paths` (each a path on that server, with its query)
 * as tabs of headless Chromium (one browser each) that no DevTools client drives. A page reports by POSTing a
 * JSON body to `/result?tab=<i>` (`i`: its index in `paths`, passed in its query by the caller):
 * `{ ok: true, value }` resolves `results[i]` with `value`, `{ ok: false, error }` rejects it.
 * `close` stops the browser and the server.
 * @param {Record<string, { type: string; body: string }>} files
 * @param {string[]} paths
 * @param {{ args?: string[] }} [options]
 */
export async function openTabs(files, paths, options = {}) {
  const executablePath = findChromium();
  if (executablePath === null) throw new Error('no chromium found (set WEBSHARD_CHROMIUM)');
  /** @type {{ resolve(value: unknown): void; reject(error: Error): void }[]} */
  const settle = [];
  const results = paths.map(
    (_, i) =>
      new Promise((resolve, reject) => {
        settle[i] = { resolve, reject };
      }),
  );
  // A tab that never reports must not leave an unhandled rejection behind once closed.
  for (const result of results) result.catch(() => {});
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://127.0.0.1');
    if (url.pathname === '/result' && request.method === 'POST') {
      let body = '';
      request.on('data', (chunk) => {
        body += chunk;
      });
      request.on('end', () => {
        response.writeHead(204).end();
        const tab = settle[Number(url.searchParams.get('tab'))];
        if (tab === undefined) return;
        try {
          const report = JSON.parse(body);
          if (report.ok) tab.resolve(report.value);
          else tab.reject(new Error(String(report.error)));
        } catch (error) {
          tab.reject(/** @type {Error} */ (error));
        }
      });
      return;
    }
    const file = files[url.pathname];
    if (file === undefined) response.writeHead(404).end();
    else response.writeHead(200, { 'content-type': file.type }).end(file.body);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  // Headless Chromium opens one target per process ("Multiple targets are not supported in
  // headless mode"): one browser per tab, each with its own profile.
  const browsers = await Promise.all(
    paths.map(async (path, i) => {
      const profile = await mkdtemp(join(tmpdir(), 'webshard-tab-'));
      const child = spawn(
        executablePath,
        [
          '--headless',
          '--no-sandbox',
          '--no-first-run',
          `--user-data-dir=${profile}`,
          ...(options.args ?? []),
          `http://127.0.0.1:${port}${path}`,
        ],
        { stdio: 'ignore' },
      );
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.once('exit', (code, signal) =>
        settle[i].reject(new Error(`chromium exited (${signal ?? code}) before tab ${i} reported`)),
      );
      return { child, exited, profile };
    }),
  );
  const close = async () => {
    for (const { child } of browsers) {
      if (child.exitCode === null && child.signalCode === null) child.kill();
    }
    await Promise.all(browsers.map(({ exited }) => exited));
    await new Promise((resolve) => server.close(() => resolve(undefined)));
    await Promise.all(browsers.map(({ profile }) => rm(profile, { recursive: true, force: true })));
  };
  return { results, close };
}
