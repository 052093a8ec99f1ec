// Browser tabs as ranks over `ws`, beside Node ranks in the same run: an all-reduce between a tab
// and a Node rank, between two tabs (ranks 1 and 2 of 3, every byte through rank 0's relay), and
// over a world of one Node rank and two tabs. Rank 0 is always a Node process (it hosts the
// store); the tabs are headless Chromium pages that join with `connectBrowserRank`. Each row's
// peer is the same all-reduce between Node ranks only (for the tabs' pair, Node ranks 1 and 2,
// which connect directly), measured just before it.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocketServer } from 'ws';
import type { BenchRow } from '@webshard/bench';
import { bundleForBrowser } from '@webshard/test-config/browser-bundle';
import { findChromium } from '@webshard/test-config/browser-page';
import { openTabs } from '@webshard/test-config/browser-tabs';
import { formatJoinUrl } from '../src/browser-rank.js';
import { freePort } from '../src/launcher/launcher.js';
import type { TabJob } from './browser-rank-page.js';
import { type BenchPlan, type BenchResult, busFactor } from './plan.js';

const here = dirname(fileURLToPath(import.meta.url));
const MiB = 1 << 20;
const TOKEN = 'bench';

/**
 * [Note: best of rounds on a shared machine]
 * Each row is the best of `ROUNDS` runs, the Node peer and the tabs taking turns, and every run's
 * figure is printed. A tab is three processes (the page's renderer, Chromium's network service
 * and its browser) where a Node rank is one, so on a machine other jobs keep busy a single run of
 * either swings 2-3x with the load of the moment; the best of a few alternating runs compares the
 * two at their least disturbed.
 */
const ROUNDS = Number(process.env.WEBSHARD_BENCH_BROWSER_ROUNDS ?? 3);

const PAGE = `<!doctype html><title>bench</title><script type="module" src="/bench.js"></script>`;

/** A world: how many ranks, how many of the last are tabs, the subgroup that runs (or all). */
interface World {
  size: number;
  tabs: number;
  name: string;
  members?: number[];
}

const WORLDS: { world: World; peer: World }[] = [
  {
    world: { size: 2, tabs: 1, name: 'Node + tab' },
    peer: { size: 2, tabs: 0, name: '2 Node' },
  },
  {
    world: { size: 3, tabs: 2, name: 'tab + tab (relayed by Node rank 0)', members: [1, 2] },
    peer: { size: 3, tabs: 0, name: 'Node + Node (ranks 1, 2 of 3)', members: [1, 2] },
  },
  {
    world: { size: 3, tabs: 2, name: 'Node + 2 tabs' },
    peer: { size: 3, tabs: 0, name: '3 Node' },
  },
];

/** Starts the Node ranks of `world` (bench/net-rank.ts); resolves with the results one printed. */
function nodeRanks(world: World, port: number, plan: BenchPlan): Promise<BenchResult[] | null> {
  const children = Array.from({ length: world.size - world.tabs }, (_, rank) => {
    const child = spawn(
      process.execPath,
      [
        '--conditions=@webshard/source',
        '--import',
        'tsx',
        join(here, 'net-rank.ts'),
        'ws',
        JSON.stringify(plan),
        ...(world.members === undefined ? [] : [JSON.stringify(world.members)]),
      ],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
        env: {
          ...process.env,
          RANK: String(rank),
          LOCAL_RANK: String(rank),
          WORLD_SIZE: String(world.size),
          MASTER_ADDR: '127.0.0.1',
          MASTER_PORT: String(port),
          WEBSHARD_TOKEN: TOKEN,
        },
      },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    return new Promise<string>((resolve, reject) =>
      child.on('close', (code) =>
        code === 0 ? resolve(out) : reject(new Error(`ws rank ${rank} exited ${code}`)),
      ),
    );
  });
  return Promise.all(children).then((outputs) => {
    const line = outputs
      .join('\n')
      .split('\n')
      .find((l) => l.startsWith('@@results '));
    return line === undefined
      ? null
      : (JSON.parse(line.slice('@@results '.length)) as BenchResult[]);
  });
}

/**
 * The rows, or none (with a line saying why) where no Chromium is installed. `sizesMiB`: the
 * all-reduce sizes. Each world's tabs run in a fresh headless Chromium that no DevTools client
 * drives ([Note: timing tabs without the DevTools protocol] in tooling/test/src/browser-tabs.js).
 */
export async function browserRankRows(sizesMiB: readonly number[]): Promise<BenchRow[]> {
  if (findChromium() === null) {
    console.log(
      'browser ranks skipped: no chromium (apt-get install chromium, or WEBSHARD_CHROMIUM)',
    );
    return [];
  }
  const plan: BenchPlan = { ops: ['allReduce'], sizesMiB, warmup: 3 };
  const bundle = await bundleForBrowser(join(here, 'browser-rank-page.ts'), dirname(here));
  if (bundle.nodeImports.length > 0)
    throw new Error(`bench page: ${bundle.nodeImports.join(', ')}`);
  const files = {
    '/': { type: 'text/html', body: PAGE },
    '/bench.js': { type: 'text/javascript', body: bundle.code },
  };
  /** Opens one tab per job and resolves with what each reported. */
  const inTabs = async (jobs: TabJob[]): Promise<unknown[]> => {
    const paths = jobs.map(
      (job, tab) => `/?${new URLSearchParams({ tab: String(tab), job: JSON.stringify(job) })}`,
    );
    const tabs = await openTabs(files, paths);
    try {
      return await Promise.all(tabs.results);
    } finally {
      await tabs.close();
    }
  };
  const run = async (world: World) => {
    console.log(`ws, ${world.name}...`);
    const port = await freePort();
    const tabRanks = Array.from({ length: world.tabs }, (_, i) => world.size - world.tabs + i);
    const url =
      tabRanks.length === 0 ? '' : formatJoinUrl(`ws://127.0.0.1:${port}`, world.size, tabRanks);
    const node = nodeRanks(world, port, plan);
    const jobs = tabRanks.map(
      (): TabJob => ({ kind: 'rank', url, token: TOKEN, plan, members: world.members ?? null }),
    );
    const pages = jobs.length === 0 ? Promise.resolve([]) : inTabs(jobs);
    const [fromNode, fromTabs] = await Promise.all([node, pages]);
    const results = [fromNode, ...(fromTabs as (BenchResult[] | null)[])].find((r) => r !== null);
    if (results === undefined) throw new Error(`${world.name}: no rank reported results`);
    return results;
  };
  const rows: BenchRow[] = await rawReceiveRows(inTabs, sizesMiB);
  const busbw = (result: BenchResult, size: number) =>
    Math.round(
      ((result.sizeMiB * MiB) / (result.medianMs / 1e3) / 1e6) * busFactor('allReduce', size),
    );
  // Best of `ROUNDS`, the peer and the tabs alternating: on a shared machine one run of either
  // can land in a burst of other load (see [Note: best of rounds on a shared machine]).
  const best = (runs: BenchResult[][], sizeMiB: number, size: number) =>
    Math.max(...runs.map((r) => busbw(r.find((x) => x.sizeMiB === sizeMiB)!, size)));
  for (const { world, peer } of WORLDS) {
    const peerRuns: BenchResult[][] = [];
    const worldRuns: BenchResult[][] = [];
    for (let round = 0; round < ROUNDS; round++) {
      peerRuns.push(await run(peer));
      worldRuns.push(await run(world));
    }
    for (const sizeMiB of sizesMiB) {
      const all = (runs: BenchResult[][], size: number) =>
        runs.map((r) => busbw(r.find((x) => x.sizeMiB === sizeMiB)!, size)).join(', ');
      console.log(
        `${world.name} ${sizeMiB} MiB: ${all(worldRuns, world.size)} MB/s; ${peer.name}: ${all(peerRuns, peer.size)} MB/s`,
      );
      rows.push({
        name: `allReduce ws ${world.name} ${sizeMiB} MiB (best of ${ROUNDS})`,
        metric: 'busbw',
        value: best(worldRuns, sizeMiB, world.size),
        unit: 'MB/s',
        peer: `ws ${peer.name}`,
        peerValue: best(peerRuns, sizeMiB, peer.size),
      });
    }
  }
  return rows;
}

/**
 * The bound under any tab's traffic: a plain WebSocket in the page receiving one message of each
 * size from a Node `ws` server (median of 7), no transport, no reduction.
 */
async function rawReceiveRows(
  inTabs: (jobs: TabJob[]) => Promise<unknown[]>,
  sizesMiB: readonly number[],
): Promise<BenchRow[]> {
  const server = new WebSocketServer({ port: 0, host: '127.0.0.1', maxPayload: 1 << 30 });
  await new Promise((resolve) => server.once('listening', resolve));
  server.on('connection', (socket) =>
    socket.on('message', (data) => socket.send(Buffer.alloc(Number(data.toString())))),
  );
  try {
    const port = (server.address() as { port: number }).port;
    const [medians] = (await inTabs([{ kind: 'raw', port, sizesMiB }])) as number[][];
    return sizesMiB.map((sizeMiB, i) => ({
      name: `tab bound: a page's WebSocket receiving ${sizeMiB} MiB from Node ws`,
      metric: 'bandwidth',
      value: Math.round((sizeMiB * MiB) / (medians![i]! / 1e3) / 1e6),
      unit: 'MB/s',
    }));
  } finally {
    server.close();
  }
}
