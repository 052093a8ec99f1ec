import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { findChromium, skipWithoutChromium } from '@webshard/test-config/browser-page';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliOutcome, main } from '../run-cli.js';
import type { RankStatus } from './browser-page.js';

// Headless Chromium tabs as ranks of a `webshard-train --browser-ranks` run: the page the run
// serves, the rank loop bundled for the browser, connectBrowserRank, the relay between tabs.

/** The CLI's output, and a promise of the page address it prints for the tabs. */
function captureIO() {
  let stdout = '';
  let stderr = '';
  let found: (url: string) => void;
  const url = new Promise<string>((resolve) => {
    found = resolve;
  });
  const io = {
    stdout: (text: string) => {
      stdout += text;
      const match = /open (http:\/\/[^/\s]+:\d+\/#token=[0-9a-f]+) in/.exec(text);
      if (match) found(match[1]!);
    },
    stderr: (text: string) => {
      stderr += text;
    },
    isTTY: false,
    cwd: process.cwd(),
  };
  return { io, url, out: () => stdout, err: () => stderr };
}

function statusOf(page: Page): Promise<RankStatus | undefined> {
  return page.evaluate(() => (window as { webshardRank?: RankStatus }).webshardRank);
}

/** The flags both runs share: the default GPT, 3 ranks, CPU (as the Node ranks pick here). */
const RUN = ['--world-size', '3', '--batch-size', '12', '--backend', 'cpu', '--sample-length', '0'];

describe.skipIf(skipWithoutChromium('browser-ranks.test.ts'))('browser tabs as ranks', () => {
  let browser: Browser;

  beforeAll(async () => {
    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({
      executablePath: findChromium()!,
      args: ['--no-sandbox', '--enable-unsafe-webgpu', '--enable-features=Vulkan'],
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
  });

  /** Starts the CLI with `flags`, opens `tabs` tabs on the address it prints. */
  async function startWithTabs(flags: string[], tabs: number) {
    const captured = captureIO();
    const outcome = main(flags, captured.io);
    const url = await Promise.race([
      captured.url,
      outcome.then((o) => {
        throw new Error(
          `the run ended (${o.exitCode}) before printing its page: ${captured.err()}`,
        );
      }),
    ]);
    const pages = await Promise.all(
      Array.from({ length: tabs }, async () => {
        const page = await browser.newPage();
        await page.goto(url);
        return page;
      }),
    );
    return { ...captured, outcome, pages };
  }

  for (const strategy of ['fsdp', 'ddp']) {
    it(`${strategy}: one Node rank and two tabs train the default GPT with the losses of three Node ranks`, async () => {
      const steps = ['--strategy', strategy, '--steps', '5', ...RUN];
      const quiet = captureIO();
      const reference: CliOutcome = await main([...steps, '--transport', 'local'], quiet.io);
      expect(reference.exitCode).toBe(0);
      const expected = reference.summary!.records.map((r) => r.loss);

      // Rank 0's outputs stay with --browser-ranks: --save gathers the full weights from the tabs.
      const dir = mkdtempSync(join(tmpdir(), 'browser-ranks-'));
      const save = join(dir, 'model.safetensors');
      const run = await startWithTabs(
        [...steps, '--transport', 'ws', '--browser-ranks', '2', '--save', save],
        2,
      );
      const outcome = await run.outcome;
      expect(existsSync(save)).toBe(true);
      rmSync(dir, { recursive: true });
      expect(run.err()).toBe('');
      expect(outcome.exitCode).toBe(0);
      expect(run.out()).toContain(`strategy: ${strategy} on 3 rank(s) over ws`);
      const losses = outcome.summary!.records.map((r) => r.loss);
      expect(losses).toHaveLength(5);
      expect(losses).toEqual(expected);
      // Each tab took a rank of its own and saw the same (mean over ranks) losses.
      const statuses = await Promise.all(run.pages.map(statusOf));
      expect(statuses.map((s) => (s?.state === 'done' ? s.rank : s)).sort()).toEqual([1, 2]);
      for (const status of statuses) expect(status).toMatchObject({ losses: expected });
      await Promise.all(run.pages.map((p) => p.close()));
    }, 240_000);
  }

  it('two Node ranks (launched processes) and one tab: the README command, with the losses of three Node ranks', async () => {
    const steps = ['--strategy', 'fsdp', '--steps', '2', ...RUN];
    const reference = await main([...steps, '--transport', 'local'], captureIO().io);
    const expected = reference.summary!.records.map((r) => r.loss);
    const run = await startWithTabs([...steps, '--transport', 'ws', '--browser-ranks', '1'], 1);
    const outcome = await run.outcome;
    expect(outcome.exitCode, `${run.out()}\n${run.err()}`).toBe(0);
    expect(run.out()).toContain('[rank 0] strategy: fsdp on 3 rank(s) over ws');
    expect(await statusOf(run.pages[0]!)).toMatchObject({
      state: 'done',
      rank: 2,
      losses: expected,
    });
    await run.pages[0]!.close();
  }, 240_000);

  // --browser-host: the page, the store and the Node rank on another address of this machine (a
  // tab elsewhere would dial the same), not loopback; plain http, so the run warns.
  const lan = Object.values(networkInterfaces())
    .flat()
    .find((i) => i !== undefined && i.family === 'IPv4' && !i.internal)?.address;
  it.skipIf(lan === undefined)(
    '--browser-host: a tab joins through another address of this machine, with the cleartext warnings',
    async () => {
      const steps = ['--strategy', 'ddp', '--steps', '2', ...RUN, '--world-size', '2'];
      const reference = await main([...steps, '--transport', 'local'], captureIO().io);
      const expected = reference.summary!.records.map((r) => r.loss);
      const flags = [...steps, '--transport', 'ws', '--browser-ranks', '1', '--browser-host', lan!];
      const run = await startWithTabs(flags, 1);
      expect(run.pages[0]!.url()).toMatch(new RegExp(`^http://${lan!.replaceAll('.', '\\.')}:`));
      const outcome = await run.outcome;
      expect(outcome.exitCode).toBe(0);
      expect(run.err()).toContain(`--browser-host ${lan} without TLS`);
      expect(run.err()).toContain('not a secure context');
      expect(await statusOf(run.pages[0]!)).toMatchObject({
        state: 'done',
        rank: 1,
        losses: expected,
      });
      await run.pages[0]!.close();
    },
    240_000,
  );

  it('a tab closed mid-run fails the Node rank within the group deadline, naming its rank', async () => {
    const run = await startWithTabs(
      [
        '--strategy',
        'fsdp',
        '--steps',
        '1000',
        ...RUN,
        '--transport',
        'ws',
        '--browser-ranks',
        '2',
      ],
      2,
    );
    // Close a tab once training runs (rank 0 prints each step).
    const deadline = Date.now() + 120_000;
    while (!/step +2\//.test(run.out()) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const status = await statusOf(run.pages[1]!);
    expect(status?.state).toBe('training');
    const closed = (status as { rank: number }).rank;
    const closedAt = Date.now();
    await run.pages[1]!.close();
    const outcome = await run.outcome;
    const seconds = (Date.now() - closedAt) / 1000;
    expect(outcome.exitCode).toBe(1);
    expect(run.err()).toMatch(
      new RegExp(`^webshard-train: rank 0: \\w+Error: .*rank ${closed}\\b`),
    );
    // The group deadline (start-ranks.ts) is 120 s; a closed socket is noticed long before.
    expect(seconds).toBeLessThan(120);
    console.log(
      `closed tab (rank ${closed}) -> rank 0 failed after ${seconds.toFixed(1)} s: ${run.err().trim()}`,
    );
    await run.pages[0]!.close();
  }, 240_000);
});
