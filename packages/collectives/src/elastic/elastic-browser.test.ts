import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleForBrowser } from '@webshard/test-config/browser-bundle';
import { openPage, skipWithoutChromium } from '@webshard/test-config/browser-page';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ElasticCoordinator } from './coordinator.js';
import { type ElasticGroup, joinElastic } from './elastic-group.js';
import { elasticShare } from './partition.js';
import { broadcastState, type StateValue } from './state-transfer.js';

// [Note: elastic membership] with browser tabs: a Node member (it listens, so the tabs reach each
// other through it: [Note: ws connections]) and two tabs train; a tab is closed, the two others go
// on, a new tab joins and receives the state bit for bit, and the three finish alike.
const here = dirname(fileURLToPath(import.meta.url));
const SIZE = 64;
const BATCH = 12;
const STEPS = 9;

/** The toy step, the same text in the page and here: least squares toward a moving target. */
const STEP_SOURCE = `(params, step, start, count) => {
  const grad = new Float32Array(params.length);
  for (let i = start; i < start + count; i++) {
    const global = step * ${BATCH} + i;
    for (let j = 0; j < params.length; j++) grad[j] += params[j] - Math.sin(0.01 * (j + 1) * (global + 1));
  }
  return grad;
}`;
const localGradient = new Function(`return ${STEP_SOURCE}`)() as (
  params: Float32Array,
  step: number,
  start: number,
  count: number,
) => Float32Array;

const PAGE = `<!doctype html><title>elastic</title><script type="module">
import * as collectives from '/collectives.js';
const gradient = ${STEP_SOURCE};
window.member = async (url, link) => {
  try {
    const elastic = await collectives.joinElastic({ url, backend: 'ws', connectTimeoutMs: 10000, link });
    const id = elastic.membership.id;
    const params = new Float32Array(${SIZE}).fill(id + 1);
    const step = new Int32Array(1);
    const state = new Map([['params', params], ['step', step]]);
    await collectives.broadcastState(elastic.group, state);
    const admitted = Array.from(params);
    const epochs = [elastic.membership.epoch];
    while (step[0] < ${STEPS}) {
      const { rank, worldSize } = elastic.membership;
      const share = collectives.elasticShare(${BATCH}, worldSize, rank);
      let failed = false;
      try {
        const grad = gradient(params, step[0], share.start, share.count);
        await elastic.group.allReduce(grad).wait();
        for (let j = 0; j < params.length; j++) params[j] -= (0.5 * grad[j]) / ${BATCH};
        step[0] += 1;
      } catch {
        failed = true;
      }
      const change = await elastic.sync({ failed });
      if (change !== null) {
        epochs.push(change.epoch);
        await collectives.broadcastState(elastic.group, state);
      }
    }
    await elastic.close();
    return { id, admitted, epochs, params: Array.from(params) };
  } catch (e) {
    return { error: e.name + ': ' + e.message };
  }
};
window.ready = true;
</script>`;

interface TabResult {
  id: number;
  admitted: number[];
  epochs: number[];
  params: number[];
  error?: string;
}

/**
 * This process as a member: the toy state (from rank 0), and one step of it: a failed step is
 * reported at the sync point, and after a change the state goes out again. The change, or null.
 */
async function nodeMember(elastic: ElasticGroup, timeoutMs?: number) {
  const params = new Float32Array(SIZE).fill(1);
  const step = new Int32Array(1);
  const state = new Map<string, StateValue>([
    ['params', params],
    ['step', step],
  ]);
  await broadcastState(elastic.group, state);
  const oneStep = async () => {
    const { rank, worldSize } = elastic.membership;
    const share = elasticShare(BATCH, worldSize, rank);
    let failed = false;
    try {
      const grad = localGradient(params, step[0]!, share.start, share.count);
      await elastic.group.allReduce(grad, timeoutMs === undefined ? {} : { timeoutMs }).wait();
      for (let j = 0; j < SIZE; j++) params[j]! -= (0.5 * grad[j]!) / BATCH;
      step[0]! += 1;
    } catch {
      failed = true;
    }
    const change = await elastic.sync({ failed });
    if (change !== null) await broadcastState(elastic.group, state);
    return change;
  };
  return { params, step, oneStep };
}

describe.skipIf(skipWithoutChromium('elastic-browser.test.ts'))(
  'an elastic world with tabs',
  () => {
    let opened: Awaited<ReturnType<typeof openPage>> | undefined;
    let coordinator: ElasticCoordinator | undefined;

    beforeAll(async () => {
      const bundle = await bundleForBrowser(join(here, '..', 'index.ts'), join(here, '..', '..'));
      expect(bundle.nodeImports).toEqual([]);
      opened = await openPage({
        '/': { type: 'text/html', body: PAGE },
        '/collectives.js': { type: 'text/javascript', body: bundle.code },
      });
    }, 120_000);

    afterAll(async () => {
      await opened?.close();
      await coordinator?.close();
    });

    /** A tab running `window.member(url, link)`. */
    const openTab = async (url: string, link?: string) => {
      const page = await opened!.browser.newPage();
      await page.goto(opened!.page.url());
      await page.waitForFunction(() => (window as { ready?: boolean }).ready === true);
      const result = page.evaluate(
        ([u, l]) =>
          (window as unknown as { member(u: string, l?: string): Promise<TabResult> }).member(u, l),
        [url, link] as const,
      );
      return {
        page,
        result: result.catch((error: Error) => ({ error: error.message }) as TabResult),
      };
    };

    it('a tab closed, another opened: 3 -> 2 -> 3, the newcomer gets the state bit for bit', async () => {
      coordinator = await ElasticCoordinator.start({
        minWorldSize: 2,
        maxWorldSize: 3,
        joinWindowMs: 20_000,
      });
      const url = coordinator.url;
      const tab = () => openTab(url);
      // This process joins first: it is rank 0 throughout and paces the steps.
      const node = await Promise.all([
        joinElastic({ url, backend: 'ws', connectTimeoutMs: 10_000 }),
        tab(),
        tab(),
      ]);
      const [elastic, tabA, tabB] = node;
      expect(elastic.membership).toMatchObject({ id: 0, rank: 0, worldSize: 3, epoch: 0 });
      const { params, step, oneStep } = await nodeMember(elastic);
      for (let i = 0; i < 3; i++) expect(await oneStep()).toBeNull();

      // Tab B closes while the others wait in step 4 for this member: the step fails, 2 go on.
      await tabB.page.close();
      let change = await oneStep();
      if (change === null) change = await oneStep();
      expect(change).toMatchObject({ epoch: 1, worldSize: 2, joined: [] });
      expect(change!.left).toHaveLength(1);
      expect(await oneStep()).toBeNull();

      // A new tab waits at the coordinator and is admitted at the next sync point.
      const tabC = await tab();
      const deadline = Date.now() + 30_000;
      while (coordinator.waiting.length === 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      change = await oneStep();
      expect(change).toMatchObject({ epoch: 2, worldSize: 3, left: [] });
      const atAdmission = params.slice();
      while (step[0]! < STEPS) expect(await oneStep()).toBeNull();
      await elastic.close();

      const [a, c] = (await Promise.all([tabA.result, tabC.result])) as TabResult[];
      expect([a!.error, c!.error]).toEqual([undefined, undefined]);
      expect(c!.epochs).toEqual([2]);
      // The newcomer's parameters after admission: this member's, bit for bit (its own guess was
      // id + 1 everywhere); and all three end alike.
      const bits = (values: ArrayLike<number>) => Buffer.from(new Float32Array(values).buffer);
      expect(bits(c!.admitted).equals(bits(atAdmission))).toBe(true);
      for (const result of [a!, c!]) expect(bits(result.params).equals(bits(params))).toBe(true);
      expect(coordinator.history.map((h) => h.members.length)).toEqual([3, 2, 3]);
    }, 90_000);

    it('a tab and a Node member over a shaped link: every step takes the latency, the two end alike', async () => {
      // The link shaper in a tab ([Note: the link shaper]): its last stretch before a message is
      // due polls the event loop, which a browser does without `setImmediate`.
      const shaped = await ElasticCoordinator.start({ minWorldSize: 2, maxWorldSize: 2 });
      const link = 'latency=15ms,bandwidth=100mbit';
      try {
        const [elastic, tabA] = await Promise.all([
          joinElastic({ url: shaped.url, backend: 'ws', connectTimeoutMs: 10_000, link }),
          openTab(shaped.url, link),
        ]);
        const { params, step, oneStep } = await nodeMember(elastic, 20_000);
        const started = performance.now();
        while (step[0]! < STEPS) expect(await oneStep()).toBeNull();
        // An all-reduce of 2 ranks is at least one message each way: 15 ms a step at least.
        expect(performance.now() - started).toBeGreaterThan(STEPS * 15);
        await elastic.close();
        const a = await tabA.result;
        expect(a.error).toBeUndefined();
        const bits = (values: ArrayLike<number>) => Buffer.from(new Float32Array(values).buffer);
        expect(bits(a.params).equals(bits(params))).toBe(true);
        await tabA.page.close();
      } finally {
        await shaped.close();
      }
    }, 90_000);
  },
);
