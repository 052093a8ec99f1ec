import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findChromium } from '@webshard/test-config/browser-page';
import type { Browser, BrowserContext } from 'playwright-core';

/*
 * [Note: a tab hidden in headless Chromium]
 * A page Playwright opens is never hidden: on every page it enables focus emulation
 * (`Emulation.setFocusEmulationEnabled`), which keeps the page's contents "captured", so visible,
 * whatever is in front of it; and its launch flags turn off the throttling of background pages
 * (`--disable-background-timer-throttling`, `--disable-renderer-backgrounding`). So the liveness
 * tests start Chromium themselves, with its own defaults, and attach with `connectOverCDP` and
 * `noDefaults` (no focus emulation in the default context): a tab with another opened in front
 * of it in its window is hidden (`document.visibilityState` 'hidden'), and its timers are
 * throttled, as in a user's browser.
 */

/** Headless Chromium with its own defaults, its default context, and `close` to end it. */
export interface PlainChromium {
  browser: Browser;
  context: BrowserContext;
  close(): Promise<void>;
}

/** Starts headless Chromium (`findChromium()`) on a DevTools port and attaches Playwright. */
export async function launchPlainChromium(): Promise<PlainChromium> {
  const profile = await mkdtemp(join(tmpdir(), 'webshard-chromium-'));
  const child: ChildProcess = spawn(
    findChromium()!,
    [
      ...['--headless', '--no-sandbox', '--no-first-run', '--no-default-browser-check'],
      ...['--remote-debugging-port=0', `--user-data-dir=${profile}`, 'about:blank'],
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const endpoint = await new Promise<string>((resolve, reject) => {
    let said = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      said += chunk.toString();
      const found = /DevTools listening on (ws:\/\/\S+)/.exec(said)?.[1];
      if (found !== undefined) resolve(found);
    });
    child.once('exit', (code) => reject(new Error(`chromium exited (${code}): ${said}`)));
  });
  const { chromium } = await import('playwright-core');
  const browser = await chromium.connectOverCDP(endpoint, { noDefaults: true, isLocal: true });
  return {
    browser,
    context: browser.contexts()[0]!,
    close: async () => {
      await browser.close().catch(() => {});
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGKILL');
        await exited;
      }
      await rm(profile, { recursive: true, force: true });
    },
  };
}
