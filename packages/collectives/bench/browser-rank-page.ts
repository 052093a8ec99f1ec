// A tab of the browser-ranks benchmark (browser-ranks.ts bundles this for the page and opens it
// with no DevTools client attached, see [Note: timing tabs without the DevTools protocol] in
// tooling/test/src/browser-tabs.js). The page reads its job from its query and POSTs what it
// measured to `/result?tab=<tab>`: either a rank that joins the job with `connectBrowserRank` and
// runs the same plan as the Node ranks (on the world or on the subgroup `members`; its results
// where it is the first rank that ran them), or the bound (`raw`): a plain WebSocket receiving
// one message of each size from a Node `ws` server.
import { connectBrowserRank } from '../src/browser-rank.js';
import { type BenchPlan, type BenchResult, runBenchPlan } from './plan.js';

/** What a tab of the benchmark runs, from its `job` query parameter. */
export type TabJob =
  | { kind: 'rank'; url: string; token: string; plan: BenchPlan; members: number[] | null }
  | { kind: 'raw'; port: number; sizesMiB: readonly number[] };

async function runRank(job: Extract<TabJob, { kind: 'rank' }>): Promise<BenchResult[] | null> {
  const { url, token, plan, members } = job;
  const timeoutMs = 600_000;
  const { group } = await connectBrowserRank({
    url,
    token,
    timeoutMs: 60_000,
    group: { timeoutMs },
  });
  try {
    const runner = members === null ? group : group.newGroup(members, { timeoutMs });
    let results: BenchResult[] | null = null;
    if (runner !== null) {
      const mine = await runBenchPlan(runner, plan);
      if (runner.rank === 0) results = mine;
    }
    if (members !== null) await group.barrier().wait();
    return results;
  } finally {
    await group.close();
  }
}

/** Median milliseconds (of 7) to receive one message of each size, asked for by text. */
async function runRaw(job: Extract<TabJob, { kind: 'raw' }>): Promise<number[]> {
  const socket = new WebSocket(`ws://127.0.0.1:${job.port}`);
  socket.binaryType = 'arraybuffer';
  await new Promise((resolve) => {
    socket.onopen = resolve;
  });
  const medians: number[] = [];
  for (const size of job.sizesMiB) {
    const times: number[] = [];
    for (let i = 0; i < 7; i++) {
      const start = performance.now();
      socket.send(String(size * 2 ** 20));
      await new Promise((resolve) => {
        socket.onmessage = resolve;
      });
      times.push(performance.now() - start);
    }
    medians.push(times.sort((a, b) => a - b)[3]!);
  }
  socket.close();
  return medians;
}

async function main(): Promise<void> {
  const query = new URLSearchParams(location.search);
  const job = JSON.parse(query.get('job')!) as TabJob;
  let report: { ok: true; value: unknown } | { ok: false; error: string };
  try {
    report = { ok: true, value: job.kind === 'raw' ? await runRaw(job) : await runRank(job) };
  } catch (error) {
    report = { ok: false, error: String((error as Error)?.stack ?? error) };
  }
  await fetch(`/result?tab=${query.get('tab')}`, { method: 'POST', body: JSON.stringify(report) });
}

void main();
