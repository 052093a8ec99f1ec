// Plain JavaScript with a declaration file beside it, like index.js.
import { existsSync } from 'node:fs';
import { createServer } from 'node:http';

/**
 * A Chromium to run pages in: `WEBSHARD_CHROMIUM`, else Debian's package; null when none exists.
 * @returns {string | null}
 */
export function findChromium() {
  const candidates = [
    process.env.WEBSHARD_CHROMIUM,
    '/usr/bin/chromium',
    '/usr/bin/chromium-browser',
  ];
  return candidates.find((c) => c !== undefined && existsSync(c)) ?? null;
}

/**
 * Whether a test that needs Chromium should skip here: true when none is found and
 * `WEBSHARD_REQUIRE_BROWSER=1` is not set (CI sets it, so there a missing Chromium fails). Prints
 * why it skips, naming `test`.
 * @param {string} test
 * @returns {boolean}
 */
export function skipWithoutChromium(test) {
  if (findChromium() !== null || process.env.WEBSHARD_REQUIRE_BROWSER === '1') return false;
  console.warn(
    `${test}: skipping the headless Chromium check: no chromium found (apt-get install chromium, or set WEBSHARD_CHROMIUM; WEBSHARD_REQUIRE_BROWSER=1 makes this a failure)`,
  );
  return true;
}

/**
 * Serves `files` from a server on 127.0.0.1 (a real local origin: Chromium's local network access
 * checks refuse a routed page's WebSockets to 127.0.0.1, and http://127.0.0.1 is a secure context,
 * as WebGPU needs), opens `/` in headless Chromium with WebGPU allowed (`--enable-unsafe-webgpu`).
 * `initScript` runs in the page before its own scripts; `headers` go with every file served
 * (`Cross-Origin-Opener-Policy` and `Cross-Origin-Embedder-Policy` make the page cross-origin
 * isolated, so it has `SharedArrayBuffer`). Console errors and uncaught exceptions
 * are collected in `errors`; `close` stops the browser and the server.
 * @param {Record<string, { type: string; body: string }>} files
 * @param {{ initScript?: string; headers?: Record<string, string> }} [options]
 */
export async function openPage(files, options = {}) {
  const executablePath = findChromium();
  if (executablePath === null) throw new Error('no chromium found (set WEBSHARD_CHROMIUM)');
  const server = createServer((request, response) => {
    const file = files[new URL(request.url ?? '/', 'http://127.0.0.1').pathname];
    if (request.url === '/favicon.ico') response.writeHead(204).end();
    else if (file === undefined) response.writeHead(404).end();
    else response.writeHead(200, { ...options.headers, 'content-type': file.type }).end(file.body);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  const stopServer = () => new Promise((resolve) => server.close(() => resolve(undefined)));
  const { chromium } = await import('playwright-core');
  const browser = await chromium
    .launch({
      executablePath,
      args: ['--no-sandbox', '--enable-unsafe-webgpu', '--enable-features=Vulkan'],
    })
    .catch(async (error) => {
      await stopServer();
      throw error;
    });
  const close = async () => {
    await browser.close();
    await stopServer();
  };
  /** @type {string[]} */
  const errors = [];
  try {
    const page = await browser.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text());
    });
    page.on('pageerror', (e) => errors.push(e.message));
    if (options.initScript !== undefined) await page.addInitScript(options.initScript);
    await page.goto(`http://127.0.0.1:${port}/`);
    return { browser, page, errors, close };
  } catch (error) {
    await close();
    throw error;
  }
}
