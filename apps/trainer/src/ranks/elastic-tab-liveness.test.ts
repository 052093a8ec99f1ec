import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { skipWithoutChromium } from '@webshard/test-config/browser-page';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  allEnded,
  cli,
  followLog,
  killStarted,
  type Line,
  lines,
  type Started,
  signalAll,
  startCoordinator,
  until,
} from '../test-support/cli-process.js';
import { launchPlainChromium, type PlainChromium } from '../test-support/plain-chromium.js';
import type { RankStatus } from './browser-page.js';

// [Note: liveness in an elastic world] (collectives) for a browser tab, in headless Chromium: a
// tab frozen (the Page Lifecycle's frozen state, as Chrome freezes a background tab) is dropped
// after --member-timeout and the Node members go on; unfrozen, it joins again as a newcomer. A
// tab hidden behind another (its timers throttled) answers the coordinator's beats from its
// socket's message handler and is kept. A tiny model and a short member timeout, so each run
// stays short on a loaded machine.
const MODEL = ['--n-layer', '1', '--n-embd', '32', '--n-head', '2', '--block-size', '16'];
const RUN = [
  ...MODEL,
  ...['--batch-size', '12', '--backend', 'cpu', '--sample-length', '0', '--seed', '7'],
  ...['--strategy', 'ddp'],
];
const TIMEOUT = ['--member-timeout', '3'];

const steps = (read: Line[]) => read.filter((line) => line.event === undefined);
const changes = (read: Line[]) => read.filter((line) => line.event === 'membership');

function statusOf(page: Page): Promise<RankStatus | undefined> {
  return page.evaluate(() => (window as { webshardRank?: RankStatus }).webshardRank);
}

/** What the page shows (either page: the trainer's minimal one or the playground's join mode). */
function pageText(page: Page): Promise<string> {
  return page.evaluate(() => document.body.textContent ?? '');
}

/** Polls the tab's status until `ready` says it is the one awaited. */
async function statusUntil(
  page: Page,
  what: string,
  ready: (status: RankStatus | undefined) => boolean,
  timeoutMs = 40_000,
): Promise<RankStatus> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const status = await statusOf(page);
    if (ready(status)) return status!;
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}: ${JSON.stringify(status)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// Skipped only where no Chromium is installed (it says so), as the trainer's other tab tests.
describe.skipIf(skipWithoutChromium('elastic-tab-liveness.test.ts'))(
  'a browser tab in an elastic world: frozen, hidden',
  () => {
    let chromium: PlainChromium;
    let out: string;

    beforeAll(async () => {
      out = await mkdtemp(join(tmpdir(), 'webshard-tab-liveness-'));
      chromium = await launchPlainChromium();
    }, 60_000);

    afterAll(async () => {
      killStarted();
      await chromium?.close();
      await rm(out, { recursive: true, force: true });
    });

    /**
     * A coordinator serving the tab page, 2 Node members over ws (ids 0 and 1: rank 0, which
     * writes the log, stays a Node member), then the tab (id 2): the world of 3 forms at once.
     */
    async function worldOfThree(name: string, total: number, env: Record<string, string> = {}) {
      const { coordinator, url } = await startCoordinator(2, 3, 60, [
        ...['--browser-port', '0', ...TIMEOUT],
        ...RUN,
        ...['--steps', String(total)],
      ]);
      const address = await until(
        'the tab page',
        () => /browser tabs join at (http:\/\/\S+)/.exec(coordinator.stdout())?.[1],
      );
      const log = join(out, `${name}.jsonl`);
      const follow = followLog(log);
      const run = [...RUN, '--steps', String(total), '--transport', 'ws', '--log-jsonl', log];
      const nodes = [0, 1].map(() => cli([...run, '--elastic', url], env));
      await until('both Node members waiting', () =>
        /member 1 waits/.test(coordinator.stdout()) ? true : null,
      );
      const tab = await chromium.context.newPage();
      await tab.goto(address);
      await until(
        'a step of the world of 3',
        () => (changes(follow.latest()).length >= 1 && steps(follow.latest()).length >= 1) || null,
        60_000,
      );
      const status = await statusUntil(
        tab,
        'the tab in epoch 0',
        (s) => s?.state === 'training' && s.elastic !== undefined,
      );
      expect(status).toMatchObject({
        state: 'training',
        worldSize: 3,
        elastic: { id: 2, epoch: 0, rejoined: 0, memberTimeoutSeconds: 3 },
      });
      // The page says what happens when the tab sleeps (the minimal page or the playground's).
      expect(await pageText(tab)).toContain(
        "If this tab is frozen or asleep longer than the member timeout (3 s), the world drops it and goes on; when it wakes it joins again as a newcomer, with the world's state.",
      );
      return { coordinator, nodes, tab, follow, log };
    }

    /** Every Node member and the coordinator exit 0. */
    async function allExitZero(nodes: Started[], coordinator: Started): Promise<void> {
      const results = await allEnded([...nodes, coordinator]);
      for (const result of results.slice(0, -1)) {
        expect([result.code, result.stderr]).toEqual([0, '']);
      }
      expect(results.at(-1)!.code).toBe(0);
    }

    it('a frozen tab is dropped after --member-timeout, the Node members go on; unfrozen, it joins again as a newcomer; all exit 0', async () => {
      const total = 40;
      const { coordinator, nodes, tab, follow, log } = await worldOfThree('frozen', total);
      const cdp = await tab.context().newCDPSession(tab);
      await cdp.send('Page.setWebLifecycleState', { state: 'frozen' });
      const frozenAt = Date.now();
      await until(
        'a step of the world of 2',
        () => {
          const read = follow.latest();
          return (changes(read).length === 2 && read.at(-1)!.event === undefined) || null;
        },
        60_000,
      );
      const droppedAfter = (Date.now() - frozenAt) / 1000;
      expect(coordinator.stdout()).toMatch(/epoch 1, 2 member\(s\) \[0, 1\], left \[2\]/);
      // Woken once the world went on without it: it learns it was dropped and joins again, with
      // a new id (3), at the world's next sync point (the Node members wait there meanwhile).
      signalAll(nodes, 'SIGSTOP');
      await cdp.send('Page.setWebLifecycleState', { state: 'active' });
      const wokenAt = Date.now();
      await until('the woken tab waiting', () =>
        /member 3 waits/.test(coordinator.stdout()) ? true : null,
      );
      const waitingAfter = (Date.now() - wokenAt) / 1000;
      signalAll(nodes, 'SIGCONT');
      // Its status says so: a new id, the world's epoch, dropped and joined again once.
      const back = await statusUntil(
        tab,
        'the tab training again',
        (status) => status?.state === 'training' && status.elastic?.rejoined === 1,
      );
      expect(back).toMatchObject({
        state: 'training',
        rank: 2,
        worldSize: 3,
        elastic: { id: 3, epoch: 2, rejoined: 1 },
      });
      expect(await pageText(tab)).toContain(
        'it was dropped while frozen or asleep and joined again as a newcomer, member 3',
      );
      await allExitZero(nodes, coordinator);
      follow.stop();
      const done = await statusUntil(tab, 'the tab done', (status) => status?.state === 'done');
      const read = await lines(log);
      expect(changes(read).map((line) => [line.worldSize, line.left, line.joined])).toEqual([
        [3, [], [0, 1, 2]],
        [2, [2], []],
        [3, [], [3]],
      ]);
      expect(steps(read).map((line) => line.step)).toEqual(
        Array.from({ length: total }, (_, i) => i + 1),
      );
      console.log(
        `a frozen tab dropped and the world of 2 stepping ${droppedAfter.toFixed(1)} s after it froze (--member-timeout 3); the tab waiting to join again ${waitingAfter.toFixed(1)} s after it woke; ${JSON.stringify(back)}, then ${JSON.stringify({ ...done, losses: done.state === 'done' ? done.losses.length : 0 })}`,
      );
      expect(droppedAfter).toBeLessThan(20);
      await tab.close();
    }, 120_000);

    it('a tab hidden behind another for 10 s (over 3 x --member-timeout) trains on and is kept; all exit 0', async () => {
      // However fast the machine, the run lasts over 12 s (each Node member's step blocks its
      // thread 400 ms, below the member timeout), and not much longer on a loaded one.
      const total = 32;
      const { coordinator, nodes, tab, follow, log } = await worldOfThree('hidden', total, {
        WEBSHARD_TRAINER_SLOW_MS: '400',
      });
      const front = await chromium.context.newPage();
      await front.bringToFront();
      expect(await tab.evaluate(() => document.visibilityState)).toBe('hidden');
      const before = steps(follow.latest()).length;
      const hiddenAt = Date.now();
      // Chromium throttles a hidden page's timers (chained ones wake once a second at most): the
      // tab answers the beats from its socket's message handler, not from a timer.
      const ticks = await tab.evaluate(
        () =>
          new Promise<number>((resolve) => {
            const start = performance.now();
            let count = 0;
            const tick = () => {
              count += 1;
              if (performance.now() - start < 3000) setTimeout(tick, 0);
              else resolve(count);
            };
            tick();
          }),
      );
      await until('10 s hidden', () => (Date.now() - hiddenAt >= 10_000 ? true : null));
      const during = steps(follow.latest()).length - before;
      expect(await tab.evaluate(() => document.visibilityState)).toBe('hidden');
      expect(await statusOf(tab)).toMatchObject({ state: 'training', worldSize: 3 });
      const hiddenFor = (Date.now() - hiddenAt) / 1000;
      await allExitZero(nodes, coordinator);
      follow.stop();
      expect(coordinator.stdout()).not.toMatch(/left \[/);
      expect(changes(await lines(log)).map((line) => line.worldSize)).toEqual([3]);
      console.log(
        `a tab hidden ${hiddenFor.toFixed(1)} s (--member-timeout 3): kept, ${during} steps of the world of 3 meanwhile; its chained timers fired ${ticks} times in 3 s`,
      );
      expect(during).toBeGreaterThan(0);
      await statusUntil(tab, 'the tab done', (status) => status?.state === 'done');
      await front.close();
      await tab.close();
    }, 120_000);
  },
);
