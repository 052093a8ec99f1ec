/**
 * A tab's memory at GPT-2 124M under DiLoCo: an elastic world of one headless Chromium tab (the
 * coordinator serves the page; `--strategy diloco --inner-steps 1 --outer-compression int8`, 2
 * steps, block 256, one sequence a step, GPT-2's tokenizer on the repository corpus), and the peak
 * resident memory (VmHWM) of its renderer once it is done. Run:
 * `pnpm --filter @webshard/trainer exec tsx --conditions=@webshard/source bench/tab-memory.ts`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findChromium } from '@webshard/test-config/browser-page';
import { cli, until } from '../src/test-support/cli-process.js';
import { writeRepositoryCorpus } from './volunteers-corpus.js';
import { rendererPeakBytes } from './volunteers-world.js';

const dir = await mkdtemp(join(tmpdir(), 'webshard-tab-memory-'));
const corpus = join(dir, 'corpus.txt');
await writeRepositoryCorpus(corpus, 64 * 1024);
const args = [
  ...['--n-layer', '12', '--n-head', '12', '--n-embd', '768', '--block-size', '256'],
  ...['--batch-size', '1', '--steps', '2', '--tokenizer', 'gpt2', '--data', corpus],
  ...['--backend', 'cpu', '--sample-length', '0', '--seed', '7', '--strategy', 'diloco'],
  ...['--inner-steps', '1', '--outer-compression', 'int8'],
];
const coordinator = cli(
  [
    ...['--elastic-coordinator', '0', '--min-world-size', '1', '--max-world-size', '1'],
    ...['--elastic-wait-seconds', '1', '--browser-port', '0', ...args],
  ],
  { WEBSHARD_PLAYGROUND_DIR: 'off' },
);
const address = await until(
  'the tab page',
  () => /browser tabs join at (http:\/\/\S+)/.exec(coordinator.stdout())?.[1],
);
const { chromium } = await import('playwright-core');
// A profile on disk, as a volunteer's browser has: a context without one (incognito) keeps the
// origin private file system in memory and refuses writes past about 1.4 GB.
const browser = await chromium.launchPersistentContext(join(dir, 'profile'), {
  executablePath: findChromium()!,
  args: ['--no-sandbox'],
});
let peak = 0;
try {
  const page = await browser.newPage();
  const lines: string[] = [];
  const t0 = performance.now();
  page.on('console', (m) =>
    lines.push(`${((performance.now() - t0) / 1000).toFixed(1)} s: ${m.text()}`),
  );
  await page.goto(address);
  const started = performance.now();
  for (;;) {
    const status = await page.evaluate(
      () => (window as { webshardRank?: { state: string } }).webshardRank,
    );
    peak = Math.max(peak, (await rendererPeakBytes()) ?? 0);
    if (status?.state === 'done' || status?.state === 'failed') {
      console.log(JSON.stringify(status).slice(0, 300));
      if (status.state === 'failed') {
        console.log(`--- the tab ---\n${lines.slice(-30).join('\n')}`);
        console.log(`--- the coordinator ---\n${coordinator.stdout().slice(-3000)}`);
        const ended = await Promise.race([
          coordinator.done,
          new Promise<null>((r) => setTimeout(() => r(null), 2000)),
        ]);
        console.log(
          ended === null ? 'the coordinator runs on' : JSON.stringify(ended).slice(-3000),
        );
      }
      break;
    }
    if (performance.now() - started > 540_000) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 1000));
  }
  const steps = await page.evaluate(
    () => (window as { webshardSteps?: { ms: number; peakHostBytes?: number }[] }).webshardSteps,
  );
  console.log(
    `steps: ${JSON.stringify(steps?.map((s) => ({ ms: Math.round(s.ms), peakHostBytes: s.peakHostBytes })))}`,
  );
  console.log(
    `tab renderer peak RSS (VmHWM): ${(peak / 2 ** 20).toFixed(0)} MiB, ${((performance.now() - started) / 1000).toFixed(0)} s`,
  );
} finally {
  await browser.close();
  coordinator.child.kill('SIGTERM');
  await rm(dir, { recursive: true, force: true });
}
