// A tab of the browser-ranks benchmark (browser-ranks.ts bundles this for the page): joins the job
// as a browser rank and runs the same plan as the Node ranks, on the world or on the subgroup
// `members`; returns the results where it is the first rank that ran them.
import { connectBrowserRank } from '../src/browser-rank.js';
import { type BenchPlan, type BenchResult, runBenchPlan } from './plan.js';

async function runRank(
  url: string,
  token: string,
  plan: BenchPlan,
  members: number[] | null,
): Promise<BenchResult[] | null> {
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

(globalThis as { runRank?: typeof runRank }).runRank = runRank;
