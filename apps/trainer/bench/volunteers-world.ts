/**
 * One elastic DiLoCo world of bench:volunteers: a coordinator that serves the tab page, 2 Node
 * members and a headless Chromium tab, every link shaped by `WEBSHARD_LINK` (the members read it,
 * the tab takes the coordinator's from its job); once the world has trained `swapAt` steps a new
 * tab opens and joins (the compressed join: it downloads while the others train), and once it
 * trains the first tab closes.
 * What it measured comes from the lead's JSONL, the members' output and the tabs' pages.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import type { StepRecord } from '../src/progress.js';
import type { RankStatus } from '../src/ranks/browser-rank.js';
import type { JoinProgress } from '../src/run/elastic-join.js';
import {
  cli,
  type Line,
  lines,
  type Started,
  until as waitUntil,
} from '../src/test-support/cli-process.js';

/** The job every run of the bench trains (the DDP reference too). */
export interface VolunteerShape {
  /** `GPT-2 124M` or the tiny shape's name: the rows' prefix. */
  readonly label: string;
  readonly layers: number;
  readonly heads: number;
  readonly embd: number;
  readonly block: number;
  /** The global batch (sequences a step, split over the members). */
  readonly batch: number;
  readonly steps: number;
  readonly innerSteps: number;
  /** `--outer-compression`: `int8`, or `topk` (SparseLoCo's sparse pseudo-gradients). */
  readonly compression: 'int8' | 'int4' | 'topk';
  /** The lead's step after which the first tab closes and a second one opens. */
  readonly swapAt: number;
  /** `gpt2` (GPT-2's BPE, 50257 tokens) or `char` (the tiny run: a tab's step on GPT-2's
   * vocabulary alone is seconds on a loaded 2-core machine). */
  readonly tokenizer: 'gpt2' | 'char';
  /**
   * The coordinator's `--member-timeout` in seconds: longer than a tab's longest stretch without
   * yielding (a GPT-2 tab's step and sync hold its one thread, heartbeats included, 20-30 s each
   * on the loaded 2-core machine; bench/tab-memory.ts's tab lost its world once at the default 60,
   * after a first step of 26 s, and not in the run after).
   */
  readonly memberTimeoutSeconds: number;
  /** The coordinator's `--max-world-size`: `batch` must divide over every size from 2 to it. */
  readonly maxWorldSize: number;
  /**
   * `overlap`: the second tab opens at `swapAt` and the first closes once the second trains (4
   * members a while); `close-first`: the first closes at `swapAt`, then the second opens (3 at
   * most, so a batch of 6 divides over the world at every size).
   */
  readonly swap: 'overlap' | 'close-first';
}

/** The trainer's flags for `shape` on `corpus` (its tokenizer, the CPU backend). */
export function shapeArgs(shape: VolunteerShape, corpus: string): string[] {
  return [
    ...['--n-layer', String(shape.layers), '--n-head', String(shape.heads)],
    ...['--n-embd', String(shape.embd), '--block-size', String(shape.block)],
    ...['--batch-size', String(shape.batch), '--steps', String(shape.steps)],
    ...['--tokenizer', shape.tokenizer, '--data', corpus, '--backend', 'cpu'],
    ...['--sample-length', '0', '--seed', '7'],
  ];
}

/** What one world measured. */
export interface WorldMeasure {
  /** The job's tokens a second over the lead's steps (the syncs included). */
  jobTokensPerSecond: number;
  /** The lead's own: its share of each step's batch over its step times. */
  leadTokensPerSecond: number;
  /** The second tab's own, over the steps it took after its download landed. */
  tabTokensPerSecond: number;
  /** Seconds from the second tab's page opening to its holding the world's state. */
  admitSeconds: number;
  /** Of those, the download's own seconds and bytes (from its page). */
  downloadSeconds: number;
  downloadBytes: number;
  /** Bytes the lead sent in its outer syncs per token the job trained. */
  bytesPerToken: number;
  /** The held-out loss at the end (the lead's line), and the tokens trained. */
  heldOutLoss: number;
  tokens: number;
  parameters: number;
  /** The largest peak resident memory of a Chromium renderer (a tab), bytes; null off Linux. */
  tabPeakBytes: number | null;
}

async function pageValue<T>(page: Page, name: string): Promise<T | undefined> {
  return page.evaluate((key) => (window as unknown as Record<string, unknown>)[key], name) as T;
}

/** Whether `pid` descends from this process (Linux `/proc`). */
async function ourDescendant(pid: string): Promise<boolean> {
  let at = pid;
  for (let hops = 0; hops < 16 && at !== '0' && at !== '1'; hops++) {
    if (at === String(process.pid)) return true;
    const status = await readFile(`/proc/${at}/status`, 'utf8').catch(() => '');
    at = /PPid:\s+(\d+)/.exec(status)?.[1] ?? '0';
  }
  return false;
}

/** The highest VmHWM of this process's Chromium renderers (Linux `/proc`), or null. */
export async function rendererPeakBytes(): Promise<number | null> {
  if (process.platform !== 'linux') return null;
  const { readdir } = await import('node:fs/promises');
  let peak: number | null = null;
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (!cmdline.includes('--type=renderer') || !(await ourDescendant(pid))) continue;
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    const kb = Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? Number.NaN);
    if (Number.isFinite(kb)) peak = Math.max(peak ?? 0, kb * 1024);
  }
  return peak;
}

/**
 * Runs the world over `link` (`none`: loopback) and measures it, each tab in a context of
 * `openContext`'s (a browser of its own, as each volunteer has). `timeoutMs` bounds each wait.
 * The tabs' renderer peak is read once the second tab holds the state and at the end.
 */
export async function runVolunteerWorld(
  openContext: () => Promise<BrowserContext>,
  dir: string,
  shape: VolunteerShape,
  corpus: string,
  link: string,
  timeoutMs: number,
): Promise<WorldMeasure> {
  // The trainer's own tab page (the playground's, when built, is a bundle of its own build).
  const env: Record<string, string> = { WEBSHARD_LINK: link, WEBSHARD_PLAYGROUND_DIR: 'off' };
  const limit = process.env.WEBSHARD_TRAINER_JOIN_UPLOAD_BPS;
  if (limit !== undefined) env.WEBSHARD_TRAINER_JOIN_UPLOAD_BPS = limit;
  const run = [...shapeArgs(shape, corpus), '--strategy', 'diloco'];
  run.push('--inner-steps', String(shape.innerSteps), '--outer-compression', shape.compression);
  const log = join(dir, `volunteers-${link}.jsonl`);
  const started: Started[] = [];
  const tabLines: string[] = [];
  let pageOfSecond: Page | null = null;
  let pageOfFirst: Page | null = null;
  const t0 = performance.now();
  const say = (what: string) =>
    console.log(`[${link}] ${((performance.now() - t0) / 1000).toFixed(1)} s: ${what}`);
  const contexts: BrowserContext[] = [];
  // A process that fails (a refused flag, a crash) fails the run at the next wait, instead of the
  // wait running to its timeout.
  let failed: string | null = null;
  const watchExits = (s: Started) =>
    void s.done.then((end) => {
      if (end.code !== 0)
        failed ??= `${s.child.spawnargs.slice(-6).join(' ')}: exit ${end.code}: ${end.stderr.slice(-2000)}`;
    });
  const until = <T>(
    what: string,
    probe: () => T | undefined | null | Promise<T | undefined | null>,
    ms?: number,
  ) =>
    waitUntil(
      what,
      async () => {
        if (failed !== null) throw new Error(`while waiting for ${what}, ${failed}`);
        return probe();
      },
      ms,
    );
  try {
    const coordinator = cli(
      [
        ...['--elastic-coordinator', '0', '--min-world-size', '2'],
        ...['--max-world-size', String(shape.maxWorldSize)],
        ...['--elastic-wait-seconds', '15', '--browser-port', '0', ...run],
        ...['--member-timeout', String(shape.memberTimeoutSeconds)],
      ],
      env,
    );
    watchExits(coordinator);
    const url = await until(
      'the coordinator',
      () => /--elastic (wss?:\/\/\S+)/.exec(coordinator.stdout())?.[1],
    );
    started.push(coordinator);
    const address = await until(
      'the tab page',
      () => /browser tabs join at (http:\/\/\S+)/.exec(coordinator.stdout())?.[1],
    );
    const nodes = [0, 1].map(() =>
      cli([...run, '--transport', 'ws', '--elastic', url, '--log-jsonl', log], env),
    );
    started.push(...nodes);
    for (const node of nodes) watchExits(node);
    // The Node members start the world; the first tab joins it as a newcomer.
    await until(
      'the first step',
      async () => ((await lines(log)).some((l) => l.step >= 1) ? true : null),
      timeoutMs,
    );
    const first = await openContext();
    contexts.push(first);
    const firstPage = await first.newPage();
    pageOfFirst = firstPage;
    await firstPage.goto(address);
    say('the first tab opened');
    // The first tab trains until the lead has taken `swapAt` steps; then a second tab joins
    // (`close-first`: after the first closed).
    await until(
      `step ${shape.swapAt}`,
      async () => ((await lines(log)).some((l) => l.step >= shape.swapAt) ? true : null),
      timeoutMs,
    );
    if (shape.swap === 'close-first') {
      await first.close();
      say('the first tab closed');
    }
    const second = await openContext();
    contexts.push(second);
    const page = await second.newPage();
    const opened = performance.now();
    // The tab's own lines (data, backend, model, elastic), timed from its page's opening: where
    // its admission goes.
    const sinceOpened = () => `${((performance.now() - opened) / 1000).toFixed(1)} s`;
    page.on('console', (message) => {
      tabLines.push(`${sinceOpened()}: ${message.text()}`);
      say(`the second tab, ${tabLines.at(-1)!}`);
    });
    page.on('pageerror', (error) => tabLines.push(`page error: ${error.message}`));
    pageOfSecond = page;
    let reported = false;
    let admitSeconds = Number.NaN;
    await page.goto(address);
    // Admitted once it holds the world's state (its join progress done); then its first step.
    const firstStep = await until(
      "the second tab's first step",
      async () => {
        const now = await pageValue<JoinProgress>(page, 'webshardDownload');
        if (now !== undefined && !reported) {
          reported = true;
          say('the second tab downloads');
        }
        if (now?.done === true && Number.isNaN(admitSeconds)) {
          admitSeconds = (performance.now() - opened) / 1000;
          say(`the second tab holds the state, ${admitSeconds.toFixed(1)} s after its page opened`);
        }
        const status = await pageValue<RankStatus>(page, 'webshardRank');
        if (status?.state === 'failed') throw new Error(`the tab failed: ${status.error.message}`);
        const steps = (await pageValue<StepRecord[]>(page, 'webshardSteps'))?.length ?? 0;
        return steps > 0 ? steps : null;
      },
      timeoutMs,
    );
    const download = (await pageValue<JoinProgress>(page, 'webshardDownload')) ?? null;
    say(`the second tab's first step, ${sinceOpened()} after its page opened`);
    // A tab that took the state before the bench first looked: admitted by its first step.
    if (Number.isNaN(admitSeconds)) admitSeconds = (performance.now() - opened) / 1000;
    // `overlap`: the first tab closes once the second trains; the world goes on with the Node
    // members and it.
    if (shape.swap === 'overlap') {
      await first.close();
      say('the first tab closed');
    }
    say(
      download === null
        ? 'the second tab trains: it took the state whole (no sliced download)'
        : `the second tab trains: ${download.totalBytes} bytes in ${download.seconds.toFixed(1)} s`,
    );
    const landedAt = firstStep;
    let tabPeakBytes = await rendererPeakBytes();
    const ends = await Promise.all(started.map((s) => s.done));
    for (const [i, end] of ends.entries()) {
      if (end.code !== 0) throw new Error(`process ${i} ended with ${end.code}: ${end.stderr}`);
    }
    const status = await until(
      'the second tab done',
      async () => {
        const s = await pageValue<RankStatus>(page, 'webshardRank');
        return s?.state === 'done' || s?.state === 'failed' ? s : null;
      },
      timeoutMs,
    );
    if (status.state !== 'done') throw new Error(`the second tab ended ${status.state}`);
    const peak = await rendererPeakBytes();
    if (peak !== null) tabPeakBytes = Math.max(tabPeakBytes ?? 0, peak);
    const tabSteps = ((await pageValue<StepRecord[]>(page, 'webshardSteps')) ?? []).slice(landedAt);
    const logged = await lines(log);
    const steps = logged.filter((l) => l.event === undefined && l.tokensPerSecond !== undefined);
    if (steps.length === 0) {
      throw new Error(
        `no step in ${log}: ${JSON.stringify(logged.slice(0, 3))} (${logged.length} lines)`,
      );
    }
    const tokensPerStep = shape.batch * shape.block;
    // A step's wall time from its line: the batch's tokens over its tokens a second.
    const stepMs = (l: Line) => (1000 * tokensPerStep) / l.tokensPerSecond!;
    let worldSize = 2;
    let leadTokens = 0;
    for (const line of logged) {
      if (line.event === 'membership') worldSize = line.worldSize ?? worldSize;
      else if (line.tokensPerSecond !== undefined) leadTokens += tokensPerStep / worldSize;
    }
    const ms = steps.reduce((sum, l) => sum + stepMs(l), 0);
    const tokens = steps.length * tokensPerStep;
    const tabMs = tabSteps.reduce((sum, r) => sum + r.ms, 0);
    const out = nodes.map((n) => n.stdout()).join('\n');
    return {
      jobTokensPerSecond: (tokens * 1000) / ms,
      leadTokensPerSecond: (leadTokens * 1000) / ms,
      // Its share: the batch over the 3 members it trained with once the first tab was gone.
      tabTokensPerSecond: ((tabSteps.length * tokensPerStep) / 3 / tabMs) * 1000,
      admitSeconds,
      downloadSeconds: download?.seconds ?? Number.NaN,
      downloadBytes: download?.totalBytes ?? 0,
      bytesPerToken: steps.reduce((sum, l) => sum + (l.outerBytesSent ?? 0), 0) / tokens,
      heldOutLoss: Number(/held-out loss ([\d.]+)/.exec(out)?.[1] ?? Number.NaN),
      tokens,
      parameters: Number(/model: gpt, (\d+) parameters/.exec(out)?.[1] ?? Number.NaN),
      tabPeakBytes,
    };
  } catch (error) {
    // What the processes said, to see why.
    const said = started.map((s, i) => `--- process ${i} ---\n${s.stdout().slice(-3000)}`);
    const status = await pageOfSecond
      ?.evaluate(() => JSON.stringify((window as { webshardRank?: unknown }).webshardRank))
      .catch((e: Error) => e.message);
    said.push(`--- the second tab (${status}) ---\n${tabLines.slice(-40).join('\n')}`);
    const firstStatus = await pageOfFirst
      ?.evaluate(() => JSON.stringify((window as { webshardRank?: unknown }).webshardRank))
      .catch((e: Error) => e.message);
    said.push(`--- the first tab (${firstStatus}) ---`);
    throw new Error(`${(error as Error).message}\n${said.join('\n')}`, { cause: error });
  } finally {
    for (const context of contexts) await context.close().catch(() => {});
    for (const s of started) if (s.child.exitCode === null) s.child.kill('SIGKILL');
  }
}
