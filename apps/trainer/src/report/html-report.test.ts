import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { StepRecord } from '../progress.js';
import { renderReport } from './html-report.js';

const records: StepRecord[] = Array.from({ length: 20 }, (_, i) => ({
  step: i + 1,
  steps: 20,
  loss: 4 - i * 0.1,
  gradNorm: 1,
  lr: 3e-3,
  ms: 100,
  tokensPerSecond: 5000 + i,
  peakDeviceBytes: 1 << 20,
}));
const html = renderReport({
  title: 'webshard-train: gpt',
  settings: { model: 'gpt', lr: '0.003' },
  records,
  evals: [
    { step: 10, loss: 3.2, sample: 'a <sample> & more' },
    { step: 20, loss: 2.4, sample: '' },
  ],
});

describe('renderReport', () => {
  it('is one self-contained page: no script, no network, the charts inline', () => {
    expect(html).not.toMatch(/<script|<link|<img|https?:|url\(/i);
    expect(html.match(/<svg /g)).toHaveLength(3);
    expect(html).toContain('data-name="train loss"');
    expect(html).toContain('data-name="held-out loss"');
    expect(html).toContain('data-name="tokens/s"');
    expect(html).toContain('data-name="peak device bytes"');
    expect(html).toContain('<pre>a &#60;sample&#62; &#38; more</pre>');
    expect(html).toContain(
      '20 steps, final loss 2.1000, 5019 tokens/s, peak device memory 1.0 MiB',
    );
  });
});

/** A Chromium to open the report in: `WEBSHARD_CHROMIUM`, else Debian's package. */
function findChromium(): string | null {
  const candidates = [
    process.env.WEBSHARD_CHROMIUM,
    '/usr/bin/chromium',
    '/usr/bin/chromium-browser',
  ];
  return candidates.find((c): c is string => c !== undefined && existsSync(c)) ?? null;
}

const chromium = findChromium();
const required = process.env.WEBSHARD_REQUIRE_BROWSER === '1';
if (chromium === null && !required) {
  console.warn(
    'html-report.test.ts: skipping the headless Chromium check: no chromium found (apt-get install chromium, or set WEBSHARD_CHROMIUM; WEBSHARD_REQUIRE_BROWSER=1 makes this a failure)',
  );
}

describe.skipIf(chromium === null && !required)('the report in headless Chromium', () => {
  it('renders its three charts with visible lines and no console errors', async () => {
    expect(chromium, 'WEBSHARD_REQUIRE_BROWSER=1 but no chromium was found').not.toBeNull();
    const { chromium: playwright } = await import('playwright-core');
    const dir = await mkdtemp(join(tmpdir(), 'webshard-report-'));
    const browser = await playwright.launch({ executablePath: chromium!, args: ['--no-sandbox'] });
    try {
      await writeFile(join(dir, 'report.html'), html);
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('console', (m) => {
        if (m.type() === 'error') errors.push(m.text());
      });
      page.on('requestfailed', (r) => errors.push(`request ${r.url()}`));
      await page.goto(pathToFileURL(join(dir, 'report.html')).href);
      const boxes = await page.$$eval('polyline.series', (lines) =>
        lines.map((l) => {
          const box = (l as SVGGraphicsElement).getBoundingClientRect();
          return { name: l.getAttribute('data-name'), width: box.width, height: box.height };
        }),
      );
      expect(boxes.map((b) => b.name)).toEqual([
        'train loss',
        'held-out loss',
        'tokens/s',
        'peak device bytes',
      ]);
      // The loss and speed lines slope; the flat memory line still spans the width.
      for (const box of boxes) expect(box.width).toBeGreaterThan(100);
      expect(boxes[0]!.height).toBeGreaterThan(50);
      expect(await page.title()).toBe('webshard-train: gpt');
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('renderReport of a multi-rank run', () => {
  it('draws the peak device memory of every rank', () => {
    const perRank = records.map((r) => ({ ...r, peakDeviceBytesPerRank: [1 << 20, 3 << 19] }));
    const page = renderReport({ title: 't', settings: {}, records: perRank, evals: [] });
    expect(page).toContain('Peak device memory per rank');
    expect(page).toContain('data-name="rank 0 peak device bytes"');
    expect(page).toContain('data-name="rank 1 peak device bytes"');
    expect(page).not.toContain('data-name="peak device bytes"');
  });
});
