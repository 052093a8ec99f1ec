import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeTestCertificate, type TestCertificate } from '@webshard/collectives/testing';
import { findChromium, skipWithoutChromium } from '@webshard/test-config/browser-page';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  allEnded,
  cli,
  killStarted,
  type Line,
  lines,
  listenGuardEnv,
  startCoordinator,
  until,
} from '../test-support/cli-process.js';
import type { RankStatus } from './browser-page.js';

// [Note: an elastic job over the internet], end to end in headless Chromium: a coordinator with
// --tls-cert and --tls-key (a self-signed certificate for 127.0.0.1 the browser is told to accept)
// serves the page over https and itself and its stores over wss; a Node member that listens
// (wss, with the same certificate), one that listens on nothing (under the listen guard), and a
// tab train ddp together. The tab and the member behind its "NAT" cannot dial each other: their
// traffic goes through the listening member. Every URL the page loads or dials is https:// or
// wss://, and a plain http client gets nothing from the page's port.
const STEPS = 12;
const RUN = [
  ...['--n-layer', '1', '--n-embd', '32', '--n-head', '2', '--block-size', '16'],
  ...['--strategy', 'ddp', '--batch-size', '12', '--steps', String(STEPS), '--backend', 'cpu'],
  ...['--sample-length', '0', '--seed', '7'],
];

function statusOf(page: Page): Promise<RankStatus | undefined> {
  return page.evaluate(() => (window as { webshardRank?: RankStatus }).webshardRank);
}

/** How a plain http GET to `port` fares: the status it got, or the error code. */
function plainGet(port: number): Promise<string> {
  return new Promise((resolve) => {
    const sent = request({ host: '127.0.0.1', port, path: '/' }, (response) =>
      resolve(`answered ${response.statusCode}`),
    );
    sent.on('error', (error: NodeJS.ErrnoException) => resolve(`error ${error.code}`));
    sent.end();
  });
}

// Skipped, with a printed message, only where no Chromium is installed; CI sets
// WEBSHARD_REQUIRE_BROWSER=1, which makes a missing Chromium fail instead of skip.
describe.skipIf(skipWithoutChromium('elastic-tls.test.ts'))('an elastic job over TLS', () => {
  let browser: Browser;
  let certificate: TestCertificate;
  let out: string;
  beforeAll(async () => {
    certificate = makeTestCertificate();
    out = await mkdtemp(join(tmpdir(), 'webshard-elastic-tls-'));
    // Every CLI this file starts (they copy this environment) shares a real token.
    process.env.WEBSHARD_TOKEN = randomBytes(16).toString('hex');
    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({
      executablePath: findChromium()!,
      args: ['--no-sandbox', '--ignore-certificate-errors'],
    });
  }, 60_000);
  afterAll(async () => {
    killStarted();
    await browser?.close();
    certificate?.remove();
    delete process.env.WEBSHARD_TOKEN;
    await rm(out, { recursive: true, force: true });
  });

  it('a tab joins at https://, the world over wss:// with a member behind a NAT, trains to the end: the losses of one process', async () => {
    const cert = join(certificate.dir, 'cert.pem');
    const key = join(certificate.dir, 'key.pem');
    const { coordinator, url } = await startCoordinator(3, 3, 60, [
      ...['--browser-port', '0', '--tls-cert', cert, '--tls-key', key],
      ...RUN,
    ]);
    expect(url).toMatch(/^wss:\/\/127\.0\.0\.1:\d+$/);
    const pageUrl = await until(
      'the tab page',
      () => /browser tabs join at (\S+)/.exec(coordinator.stdout())?.[1],
    );
    expect(pageUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/#token=/);
    // Nothing the coordinator prints is a plain http:// or ws:// address.
    expect(coordinator.stdout()).not.toMatch(/\b(http|ws):\/\//);
    const pagePort = Number(new URL(pageUrl).port);
    expect(await plainGet(pagePort)).toBe('error ECONNRESET');

    const log = join(out, 'tls.jsonl');
    const trust = ['--tls-ca', cert];
    // Rank order is join order: the member that logs (and listens) first, so it is rank 0.
    const members = [
      cli([
        ...RUN,
        '--elastic',
        url,
        '--log-jsonl',
        log,
        '--tls-cert',
        cert,
        '--tls-key',
        key,
        ...trust,
      ]),
    ];
    await until('member 0 waiting', () => (/member 0 waits/.test(coordinator.stdout()) ? 1 : null));
    members.push(cli([...RUN, '--elastic', url, '--no-listen', ...trust], listenGuardEnv()));
    await until('member 1 waiting', () => (/member 1 waits/.test(coordinator.stdout()) ? 1 : null));
    const tab = await browser.newPage();
    const loaded: string[] = [];
    tab.on('request', (r) => loaded.push(r.url()));
    tab.on('websocket', (socket) => loaded.push(socket.url()));
    await tab.goto(pageUrl);
    const results = await allEnded([...members, coordinator]);
    for (const result of results.slice(0, 2))
      expect([result!.code, result!.stderr]).toEqual([0, '']);
    expect(results[2]!.code).toBe(0);
    let status = await statusOf(tab);
    for (let i = 0; i < 100 && status?.state === 'training'; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      status = await statusOf(tab);
    }
    expect(status).toMatchObject({ state: 'done' });
    const tabLosses = (status as { losses: number[] }).losses;
    await tab.close();

    // The page, its files and every socket it opened: https:// and wss:// only, no token.
    expect(loaded.length).toBeGreaterThan(0);
    for (const address of loaded) expect(address).toMatch(/^(https|wss):\/\//);
    const token = new URL(pageUrl).hash.slice('#token='.length);
    expect(token).toBe(process.env.WEBSHARD_TOKEN);
    for (const address of loaded) expect(address.includes(token)).toBe(false);
    expect(loaded.some((address) => address.startsWith(url))).toBe(true);

    const records: Line[] = await lines(log);
    const steps = records.filter((line) => line.event === undefined);
    expect(steps.map((line) => line.step)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
    // The tab's losses are the world's (ddp: the mean over the members), step for step.
    expect(tabLosses).toEqual(steps.map((line) => line.loss));
    const single = cli([...RUN, '--log-jsonl', `${log}.single`]);
    expect((await single.done).code).toBe(0);
    const reference = await lines(`${log}.single`);
    const gaps = steps.map(
      (line, i) => Math.abs(line.loss! - reference[i]!.loss!) / reference[i]!.loss!,
    );
    console.log(
      `elastic over TLS, a tab and a member behind a NAT, against one process: worst relative loss gap ${Math.max(...gaps).toExponential(2)}`,
    );
    expect(Math.max(...gaps)).toBeLessThan(5e-3);
  }, 180_000);
});
