import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { findChromium, skipWithoutChromium } from '@webshard/test-config/browser-page';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildAndServe } from './test-support/built-page.js';
import type { PlaygroundState } from './ui/train-view.js';

// The playground in headless Chromium: the page built with Vite, trained for a few steps on each
// backend, read back through `window.webshardPlayground` and the charts' canvases.

type Seen = Omit<PlaygroundState, 'charts'> & {
  charts: { axes: string[]; series: string[]; points: number[]; painted: number }[];
};

function read(page: Page): Promise<Seen> {
  return page.evaluate(() => {
    const s = (window as unknown as { webshardPlayground: PlaygroundState }).webshardPlayground;
    return {
      ...s,
      charts: s.charts.map((chart) => {
        const u = chart.uplot;
        const ctx = u.ctx;
        const pixels = ctx.getImageData(0, 0, ctx.canvas.width, ctx.canvas.height).data;
        let painted = 0;
        for (let i = 3; i < pixels.length; i += 4) if (pixels[i]! > 0) painted++;
        return {
          axes: u.axes.map((a) => String(a.label)),
          series: u.series.map((x) => String(x.label)),
          points: u.data
            .slice(1)
            .map(
              (ys) => Array.from(ys as ArrayLike<number | null>).filter((y) => y != null).length,
            ),
          painted,
        };
      }),
    };
  }) as Promise<Seen>;
}

describe.skipIf(skipWithoutChromium('playground.test.ts'))('the playground page', () => {
  let browser: Browser;
  let served: Awaited<ReturnType<typeof buildAndServe>>;

  beforeAll(async () => {
    served = await buildAndServe();
    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({
      executablePath: findChromium()!,
      args: ['--no-sandbox', '--enable-unsafe-webgpu', '--enable-features=Vulkan'],
    });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await served?.close();
  });

  async function open(): Promise<{ page: Page; errors: string[] }> {
    const page = await browser.newPage({ viewport: { width: 1360, height: 1100 } });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text());
    });
    await page.goto(served.url);
    return { page, errors };
  }

  it('trains on the CPU backend in a worker: curves with points, a sample that changes, pause and reset', async () => {
    const { page, errors } = await open();
    expect(await page.evaluate(() => crossOriginIsolated)).toBe(true);
    await page.selectOption('#backend', 'cpu');
    await page.fill('#steps', '60');
    await page.click('#start');
    await page.waitForFunction(
      () =>
        (window as unknown as { webshardPlayground: PlaygroundState }).webshardPlayground.state ===
        'finished',
      null,
      { timeout: 120_000 },
    );
    const seen = await read(page);
    expect(seen.error).toBeNull();
    expect(seen.backend!.kind).toBe('cpu');
    expect(seen.backend!.reason).toMatch(/^cpu \(as chosen\)/);
    expect(seen.steps.map((p) => p.step)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
    // Held-out evaluations before the first step, every 25 steps and at the end.
    expect(seen.evals.map((e) => e.step)).toEqual([0, 25, 50, 60]);
    expect(seen.evals.at(-1)!.loss).toBeLessThan(seen.evals[0]!.loss - 0.5);
    expect(new Set(seen.evals.map((e) => e.sample)).size).toBe(4);
    expect(seen.charts.map((c) => c.axes)).toEqual([
      ['step', 'loss'],
      ['step', 'tokens/s'],
    ]);
    expect(seen.charts[0]!.series).toEqual(['step', 'train loss', 'held-out loss']);
    expect(seen.charts[0]!.points).toEqual([60, 4]);
    expect(seen.charts[1]!.points).toEqual([60]);
    for (const c of seen.charts) expect(c.painted).toBeGreaterThan(1000);
    expect(await page.textContent('#stat-step')).toBe('60');
    expect(await page.textContent('#sample-title')).toBe('sample after step 60');
    expect(await page.textContent('#sample')).toBe(seen.evals.at(-1)!.sample);
    const shot = join(served.outDir, 'playground.png');
    await page.screenshot({ path: shot, fullPage: true });
    expect((await readFile(shot)).length).toBeGreaterThan(20_000);
    if (process.env.WEBSHARD_SCREENSHOT_DIR)
      await page.screenshot({
        path: join(process.env.WEBSHARD_SCREENSHOT_DIR, 'playground.png'),
        fullPage: true,
      });

    // Reset: the charts empty, the settings open again, and a new run starts from step 1.
    await page.click('#reset');
    await page.waitForFunction(
      () =>
        (window as unknown as { webshardPlayground: PlaygroundState }).webshardPlayground.state ===
        'idle',
    );
    expect((await read(page)).charts[0]!.points).toEqual([0, 0]);
    expect(await page.isEnabled('#size')).toBe(true);
    await page.fill('#steps', '1000');
    await page.click('#start');
    await page.waitForFunction(
      () =>
        (window as unknown as { webshardPlayground: PlaygroundState }).webshardPlayground.steps
          .length >= 3,
      null,
      { timeout: 60_000 },
    );
    await page.click('#pause');
    await page.waitForFunction(
      () =>
        (window as unknown as { webshardPlayground: PlaygroundState }).webshardPlayground.state ===
        'paused',
    );
    const paused = (await read(page)).steps.length;
    await page.waitForTimeout(500);
    expect((await read(page)).steps.length).toBe(paused);
    expect(await page.textContent('#start')).toBe('resume');
    await page.click('#start');
    await page.waitForFunction(
      (n) =>
        (window as unknown as { webshardPlayground: PlaygroundState }).webshardPlayground.steps
          .length > n,
      paused,
    );
    const resumed = await read(page);
    expect(resumed.steps.slice(0, paused + 1).map((p) => p.step)).toEqual(
      Array.from({ length: paused + 1 }, (_, i) => i + 1),
    );
    expect(errors).toEqual([]);
    await page.close();
  }, 240_000);

  it('trains on WebGPU where the browser has it (SwiftShader here), and auto says which it chose and why', async () => {
    const { page, errors } = await open();
    await page.selectOption('#backend', 'webgpu');
    await page.fill('#steps', '10');
    await page.click('#start');
    await page.waitForFunction(
      () =>
        ['finished', 'failed'].includes(
          (window as unknown as { webshardPlayground: PlaygroundState }).webshardPlayground.state,
        ),
      null,
      { timeout: 180_000 },
    );
    const seen = await read(page);
    expect(seen.error).toBeNull();
    expect(seen.backend!.kind).toBe('webgpu');
    expect(seen.steps).toHaveLength(10);
    expect(seen.steps.every((p) => Number.isFinite(p.loss))).toBe(true);

    await page.click('#reset');
    await page.selectOption('#backend', 'auto');
    await page.click('#start');
    await page.waitForFunction(
      () =>
        (window as unknown as { webshardPlayground: PlaygroundState }).webshardPlayground
          .backend !== null,
      null,
      { timeout: 180_000 },
    );
    const auto = await read(page);
    expect(auto.backend!.reason).toMatch(
      /^probe step [\d.]+ ms on webgpu, [\d.]+ ms on cpu: using (cpu|webgpu) \([\d.]+x as fast\)/,
    );
    expect(await page.textContent('#backend-line')).toContain(auto.backend!.reason);
    expect(errors).toEqual([]);
    await page.close();
  }, 360_000);
});
