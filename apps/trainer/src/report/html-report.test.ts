import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { StepRecord } from '../progress.js';
import { commandLine } from './command-line.js';
import { type ReportRun, renderReport } from './html-report.js';
import { reportMain } from './report-cli.js';
import { readUplotAssets } from './uplot-assets.js';

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
const run: ReportRun = {
  name: 'out/report.html',
  command: commandLine(['--steps', '20', '--data', 'my file.txt', '--report', 'out/report.html']),
  tokensPerStep: 512,
  records,
  evals: [
    { step: 10, loss: 3.2, sample: 'a <sample> & more' },
    { step: 20, loss: 2.4, sample: '' },
  ],
};
const assets = await readUplotAssets();
const html = renderReport({ title: 'webshard-train: gpt', runs: [run] }, assets);

describe('renderReport', () => {
  it('is one self-contained page: uPlot and the data inline, nothing from the network', () => {
    expect(html).not.toMatch(/<link|<img|\ssrc=|url\(/i);
    // uPlot's source names its home page in a comment; nothing else addresses the network.
    expect(html.replace('https://github.com/leeoniya/uPlot', '')).not.toMatch(/https?:/);
    expect(html.match(/<script/g)).toHaveLength(3);
    expect(html).toContain(assets.js);
    expect(html).toContain('<pre>a &#60;sample&#62; &#38; more</pre>');
    expect(html).toContain(
      '20 steps, final loss 2.1000, 5019 tokens/s, peak device memory 1.0 MiB',
    );
  });

  it('shows the settings as the command line that reproduces the run, quoted for a shell', () => {
    expect(html).toContain(
      '<pre class="command">webshard-train --steps 20 --data &#39;my file.txt&#39; --report out/report.html</pre>',
    );
    expect(html).not.toContain('<table');
  });

  it('keeps a sample that holds </script> inside its JSON block', () => {
    const tricky = renderReport(
      { title: 't', runs: [{ ...run, evals: [{ step: 1, loss: 1, sample: '</script><b>' }] }] },
      assets,
    );
    const block = tricky.slice(tricky.indexOf('id="report-data">'));
    expect(block.indexOf('</script>')).toBeGreaterThan(block.indexOf('\\u003c/script>'));
  });
});

describe('webshard-report', () => {
  it('overlays the runs of several JSONL logs; refuses a missing or malformed log by name, exit 2', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'webshard-report-cli-'));
    try {
      const log = (losses: number[]) =>
        `${losses.map((loss, i) => JSON.stringify({ step: i + 1, loss, tokensPerSecond: 100, peakDeviceBytes: 1024, tokensPerSecondPerRank: [50, 49 + i] })).join('\n')}\n{"event":"membership","step":2}\n`;
      await writeFile(join(dir, 'ddp.jsonl'), log([4, 3.5, 3.1]));
      await writeFile(join(dir, 'fsdp.jsonl'), log([4, 3.6, 3.2]));
      let out = '';
      let err = '';
      const io = { stdout: (t: string) => (out += t), stderr: (t: string) => (err += t), cwd: dir };
      expect(await reportMain(['ddp.jsonl', 'fsdp.jsonl', '-o', 'both.html'], io)).toBe(0);
      expect(out).toBe(`report: ${join(dir, 'both.html')}\n`);
      const page = await readFile(join(dir, 'both.html'), 'utf8');
      const data = JSON.parse(
        page.slice(page.indexOf('id="report-data">') + 17, page.indexOf('</script>')),
      );
      expect(data.runs.map((r: ReportRun) => [r.name, r.records.map((p) => p.loss)])).toEqual([
        ['ddp.jsonl', [4, 3.5, 3.1]],
        ['fsdp.jsonl', [4, 3.6, 3.2]],
      ]);
      expect(
        data.runs[0].records.map((p: ReportRun['records'][0]) => p.tokensPerSecondPerRank),
      ).toEqual([
        [50, 49],
        [50, 50],
        [50, 51],
      ]);
      expect(await reportMain(['missing.jsonl'], io)).toBe(2);
      expect(err).toContain('webshard-report: cannot read');
      await writeFile(join(dir, 'bad.jsonl'), '{"step":1,"loss":2}\nnot json\n');
      expect(await reportMain(['bad.jsonl'], io)).toBe(2);
      expect(err).toContain(`${join(dir, 'bad.jsonl')}:2 is not a JSON line`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
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
  it('draws three uPlot charts with labelled axes, legends per series and painted lines; log scale and tokens redraw', async () => {
    expect(chromium, 'WEBSHARD_REQUIRE_BROWSER=1 but no chromium was found').not.toBeNull();
    const { chromium: playwright } = await import('playwright-core');
    const dir = await mkdtemp(join(tmpdir(), 'webshard-report-'));
    const browser = await playwright.launch({ executablePath: chromium!, args: ['--no-sandbox'] });
    try {
      const perRank = records.map((r) => ({
        ...r,
        peakDeviceBytesPerRank: [1 << 20, 3 << 19],
        tokensPerSecondPerRank: [2500, 2400 + r.step],
      }));
      const page2 = renderReport(
        { title: 'webshard-train: gpt', runs: [{ ...run, records: perRank }] },
        assets,
      );
      await writeFile(join(dir, 'report.html'), page2);
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('console', (m) => {
        if (m.type() === 'error') errors.push(m.text());
      });
      page.on('pageerror', (e) => errors.push(e.message));
      page.on('requestfailed', (r) => errors.push(`request ${r.url()}`));
      await page.goto(pathToFileURL(join(dir, 'report.html')).href);
      const read = async () => {
        const painted = await page.$$eval('figure', (figures) =>
          figures.map((f) => {
            const canvas = f.querySelector('canvas') as HTMLCanvasElement;
            const ctx = canvas.getContext('2d')!;
            const pixels = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
            let n = 0;
            for (let i = 3; i < pixels.length; i += 4) if (pixels[i]! > 0) n++;
            return { id: f.id, painted: n };
          }),
        );
        const drawn = await page.evaluate(() =>
          (
            window as unknown as {
              webshardCharts: {
                axes: { label: string }[];
                series: { label: string }[];
                data: (number | null)[][];
                scales: { y: { distr: number } };
              }[];
            }
          ).webshardCharts.map((u) => ({
            axes: u.axes.map((a) => a.label),
            series: u.series.map((s) => s.label),
            points: u.data
              .slice(1)
              .map((ys) => ys.filter((y) => y !== null && y !== undefined).length),
            logY: u.scales.y.distr === 3,
            x0: u.data[0]![0],
          })),
        );
        return drawn.map((d, i) => ({ ...d, ...painted[i]! }));
      };
      const charts = await read();
      expect(charts.map((c) => c.id)).toEqual(['chart-loss', 'chart-speed', 'chart-memory']);
      expect(charts.map((c) => c.axes)).toEqual([
        ['step', 'loss'],
        ['step', 'tokens/s'],
        ['step', 'bytes'],
      ]);
      expect(charts[0]!.series).toEqual(['step', 'train loss', 'held-out loss']);
      expect(charts[0]!.points).toEqual([20, 2]);
      expect(charts[1]!.series).toEqual(['step', 'tokens/s', 'rank 0 tokens/s', 'rank 1 tokens/s']);
      expect(charts[1]!.points).toEqual([20, 20, 20]);
      expect(charts[2]!.series).toEqual(['step', 'rank 0 peak device', 'rank 1 peak device']);
      for (const c of charts) expect(c.painted, c.id).toBeGreaterThan(500);
      await page.check('#log-loss');
      await page.selectOption('#x-axis', 'tokens');
      const redrawn = await read();
      expect(redrawn[0]!.axes).toEqual(['tokens', 'loss']);
      expect(redrawn[0]!.logY).toBe(true);
      expect(redrawn[0]!.x0).toBe(512);
      expect(await page.title()).toBe('webshard-train: gpt');
      await page.screenshot({ path: join(dir, 'report.png'), fullPage: true });
      expect((await readFile(join(dir, 'report.png'))).length).toBeGreaterThan(10_000);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
