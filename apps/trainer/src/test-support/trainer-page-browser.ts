import { findChromium } from '@webshard/test-config/browser-page';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll } from 'vitest';
import { killStarted } from './cli-process.js';

/**
 * Headless Chromium for a describe block's tests of the trainer's own tab page: registers the
 * block's `beforeAll` (Chromium launched, `WEBSHARD_PLAYGROUND_DIR=off` so the coordinator serves
 * the trainer's page, not a built playground's bundle) and `afterAll` (the variable as it was,
 * every started CLI killed, Chromium closed), and returns the browser once launched.
 */
export function useTrainerPageBrowser(): () => Browser {
  let browser: Browser | undefined;
  const pageDir = process.env.WEBSHARD_PLAYGROUND_DIR;
  beforeAll(async () => {
    process.env.WEBSHARD_PLAYGROUND_DIR = 'off';
    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({ executablePath: findChromium()!, args: ['--no-sandbox'] });
  }, 60_000);
  afterAll(async () => {
    if (pageDir === undefined) delete process.env.WEBSHARD_PLAYGROUND_DIR;
    else process.env.WEBSHARD_PLAYGROUND_DIR = pageDir;
    killStarted();
    await browser?.close();
  });
  return () => browser!;
}
