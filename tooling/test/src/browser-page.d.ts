import type { Browser, Page } from 'playwright-core';

/** A Chromium to run pages in: `WEBSHARD_CHROMIUM`, else Debian's package; null when none. */
export function findChromium(): string | null;

/** True (after printing why) when no Chromium exists and `WEBSHARD_REQUIRE_BROWSER` is not 1. */
export function skipWithoutChromium(test: string): boolean;

/**
 * Opens `files` (served from 127.0.0.1) in headless Chromium with WebGPU allowed; `headers` are
 * sent with every file (e.g. COOP and COEP, for a cross-origin-isolated page).
 */
export function openPage(
  files: Record<string, { type: string; body: string }>,
  options?: { initScript?: string; headers?: Record<string, string> },
): Promise<{ browser: Browser; page: Page; errors: string[]; close(): Promise<void> }>;
