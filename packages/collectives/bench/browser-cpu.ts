// Where a tab's all-reduce spends CPU, against two Node ranks: a diagnostic beside the
// browser-rank rows (not a row of `pnpm bench`; Linux only, it reads /proc). Runs a 2-rank 16 MiB
// all-reduce between Node rank 0 and a headless Chromium tab, then between two Node ranks, and
// prints the CPU seconds each process used per GB each rank sent (it receives as much): each pair
// runs twice, with 15 and with 75 timed iterations, and the difference is counted, so start-up
// (Chromium's, tsx's) drops out. On a machine shared with other jobs, CPU per byte is the figure
// that does not move with their load: busbw does.
//
//   tsx --conditions=@webshard/source bench/browser-cpu.ts
import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleForBrowser } from '@webshard/test-config/browser-bundle';
import { openTabs } from '@webshard/test-config/browser-tabs';
import { formatJoinUrl } from '../src/browser-rank.js';
import { freePort } from '../src/launcher/launcher.js';
import type { TabJob } from './browser-rank-page.js';
import type { BenchPlan } from './plan.js';

const here = dirname(fileURLToPath(import.meta.url));
const TICKS = 100;
const planOf = (sizes: number): BenchPlan => ({
  ops: ['allReduce'],
  sizesMiB: Array.from({ length: sizes }, () => 16),
  warmup: 3,
});
/** Bytes each rank sends in 4 sizes' more timed iterations: half the buffer twice, 15 a size. */
const SENT = 4 * 15 * 16 * 2 ** 20;

function field(pid: string, index: number): number {
  return Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[index]);
}

/**
 * CPU seconds by process kind: the Node ranks by pid, and every Chromium process started since
 * `since` (clock ticks after boot) by its `--type` (Chromium rewrites its children's command
 * lines, and its zygote double-forks, so they are found by name and start time).
 */
function cpuByKind(ranks: Map<number, string>, since: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split(/[\0 ]/);
      let kind = ranks.get(Number(pid));
      if (kind === undefined && args[0]!.includes('chromium') && field(pid, 19) >= since) {
        const type = args.find((a) => a.startsWith('--type='))?.slice(7) ?? 'browser';
        const sub = args.find((a) => a.startsWith('--utility-sub-type='))?.slice(19);
        kind = `chromium ${sub ?? type}`;
      }
      if (kind === undefined) continue;
      out.set(kind, (out.get(kind) ?? 0) + (field(pid, 11) + field(pid, 12)) / TICKS);
    } catch {
      // The process ended between the listing and the read.
    }
  }
  return out;
}

function nodeRank(rank: number, port: number, plan: BenchPlan): ChildProcess {
  return spawn(
    process.execPath,
    [
      '--conditions=@webshard/source',
      '--import',
      'tsx',
      join(here, 'net-rank.ts'),
      'ws',
      JSON.stringify(plan),
    ],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: {
        ...process.env,
        RANK: String(rank),
        WORLD_SIZE: '2',
        MASTER_ADDR: '127.0.0.1',
        MASTER_PORT: String(port),
        WEBSHARD_TOKEN: 'bench',
      },
    },
  );
}

/** Runs one pair with `sizes` sizes of 16 MiB; CPU seconds by kind when rank 0 has its results. */
async function measure(
  withTab: boolean,
  page: string,
  sizes: number,
): Promise<Map<string, number>> {
  const plan = planOf(sizes);
  const port = await freePort();
  const since = Math.floor(Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]) * TICKS);
  const rank0 = nodeRank(0, port, plan);
  const rank1 = withTab ? null : nodeRank(1, port, plan);
  const ranks = new Map([[rank0.pid!, 'node rank 0 (accepts)']]);
  if (rank1 !== null) ranks.set(rank1.pid!, 'node rank 1 (dials)');
  const url = formatJoinUrl(`ws://127.0.0.1:${port}`, 2, [1]);
  const job: TabJob = { kind: 'rank', url, token: 'bench', plan, members: null };
  const files = {
    '/': { type: 'text/html', body: '<script type="module" src="/bench.js"></script>' },
    '/bench.js': { type: 'text/javascript', body: page },
  };
  const tabs = withTab
    ? await openTabs(files, [`/?${new URLSearchParams({ tab: '0', job: JSON.stringify(job) })}`])
    : null;
  const used = await new Promise<Map<string, number>>((resolve) => {
    let out = '';
    rank0.stdout!.on('data', (chunk: Buffer) => {
      out += chunk;
      if (out.includes('@@results')) resolve(cpuByKind(ranks, since));
    });
  });
  await Promise.all([
    new Promise((resolve) => rank0.on('close', resolve)),
    rank1 === null ? null : new Promise((resolve) => rank1.on('close', resolve)),
    tabs === null ? null : Promise.all(tabs.results).finally(() => tabs.close()),
  ]);
  return used;
}

const page = (await bundleForBrowser(join(here, 'browser-rank-page.ts'), dirname(here))).code;
for (const withTab of [true, false]) {
  const short = await measure(withTab, page, 1);
  const long = await measure(withTab, page, 5);
  const used = new Map([...long].map(([kind, s]) => [kind, s - (short.get(kind) ?? 0)]));
  console.log(withTab ? 'Node rank 0 + tab:' : 'two Node ranks:');
  for (const [kind, seconds] of [...used].sort()) {
    if (seconds < 0.05) continue;
    const perGb = seconds / (SENT / 1e9);
    console.log(`  ${kind.padEnd(40)} ${seconds.toFixed(2)} s, ${perGb.toFixed(2)} s per GB sent`);
  }
}
