// Plain JavaScript with a declaration file beside it, like index.js.
import { existsSync } from 'node:fs';

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
 * Opens `files` in headless Chromium (with WebGPU allowed: `--enable-unsafe-webgpu`), served from
 * http://localhost by request routing (a secure context, as WebGPU needs; no server, no port), and
 * loads `/`. `initScript` runs in the page before its own scripts. Console errors and uncaught
 * exceptions are collected in `errors`.
 * @param {Record<string, { type: string; body: string }>} files
 * @param {{ initScript?: string }} [options]
 */
export async function openPage(files, options = {}) {
  const executablePath = findChromium();
  if (executablePath === null) throw new Error('no chromium found (set WEBSHARD_CHROMIUM)');
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({
    executablePath,
    args: ['--no-sandbox', '--enable-unsafe-webgpu', '--enable-features=Vulkan'],
  });
  /** @type {string[]} */
  const errors = [];
  try {
    const page = await browser.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text());
    });
    page.on('pageerror', (e) => errors.push(e.message));
    if (options.initScript !== undefined) await page.addInitScript(options.initScript);
    await page.route('http://localhost/**', (route) => {
      const file = files[new URL(route.request().url()).pathname];
      if (file === undefined) return route.fulfill({ status: 404, body: '' });
      return route.fulfill({ contentType: file.type, body: file.body });
    });
    await page.goto('http://localhost/');
    return { browser, page, errors, close: () => browser.close() };
  } catch (error) {
    await browser.close();
    throw error;
  }
}
