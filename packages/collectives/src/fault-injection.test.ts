import { describe, expect, it } from 'vitest';
import { BLAME_WINDOW_MS } from './group/blame.js';
import {
  FAULT_KINDS,
  type FaultOutcome,
  type FaultPlan,
  type FaultWorld,
  judgeFaultRun,
  planFault,
} from './test-support/fault-plan.js';
import { FAULT_REGRESSION_SEEDS } from './test-support/fault-regressions.js';
import { runPlanInChildren, runPlanInProcess } from './test-support/fault-world.js';

/**
 * The randomized fault-injection suite ([Note: the fault-injection suite]): `WEBSHARD_FAULT_RUNS`
 * seeded runs (60 by default) from `WEBSHARD_FAULT_SEED_BASE`, which is new on every run unless
 * given (printed first, so a failure replays), then every seed of `FAULT_REGRESSION_SEEDS`; or the
 * one run `WEBSHARD_FAULT_SEED`. A seed that is a multiple of `PROCESS_EVERY` runs its ranks as
 * child processes (tcp or ws, where a rank can really die, stop or lose its sockets); the others
 * run every rank in this process (local, tcp, ws), a few runs at a time.
 */
const RUNS = Number(process.env.WEBSHARD_FAULT_RUNS ?? 60);
const SEED_BASE = Number(
  process.env.WEBSHARD_FAULT_SEED_BASE ?? 1 + Math.floor(Math.random() * 1_000_000_000),
);
const ONE_SEED = process.env.WEBSHARD_FAULT_SEED;
/** One seed in 5 runs child processes (1 in 25 before #33; 50075 stays one). */
const PROCESS_EVERY = 5;
/** In-process runs at once: their ranks mostly wait on timers and sockets. */
const CONCURRENT = 3;
const IN_PROCESS_LIMIT_MS = 20_000;
const CHILDREN_LIMIT_MS = 90_000;

const IN_PROCESS: readonly FaultWorld[] = ['local', 'tcp', 'ws'];
const PROCESSES: readonly FaultWorld[] = ['tcp-processes', 'ws-processes'];

function seeds(): number[] {
  if (ONE_SEED !== undefined) return [Number(ONE_SEED)];
  const fresh = Array.from({ length: RUNS }, (_, i) => SEED_BASE + i);
  const regressions = FAULT_REGRESSION_SEEDS.map((entry) => entry.seed);
  return [...fresh, ...regressions.filter((seed) => !fresh.includes(seed))];
}

function planOf(seed: number): FaultPlan {
  return planFault(seed, seed % PROCESS_EVERY === 0 ? PROCESSES : IN_PROCESS);
}

interface Tally {
  runs: number;
  outcomes: Record<FaultOutcome, number>;
  byFault: Record<string, { runs: number; right: number }>;
  byWorld: Record<string, number>;
  failures: string[];
}

async function runOne(plan: FaultPlan, tally: Tally): Promise<void> {
  const processes = plan.world.endsWith('-processes');
  const reports = processes
    ? await runPlanInChildren(plan, CHILDREN_LIMIT_MS)
    : await runPlanInProcess(plan, IN_PROCESS_LIMIT_MS);
  const { outcome, detail } = judgeFaultRun(plan, reports, BLAME_WINDOW_MS);
  tally.runs++;
  tally.outcomes[outcome]++;
  const kind = tally.byFault[plan.fault]!;
  kind.runs++;
  if (outcome === 'right') kind.right++;
  tally.byWorld[plan.world] = (tally.byWorld[plan.world] ?? 0) + 1;
  if (outcome !== 'right') {
    const line = `seed ${plan.seed} (${outcome}; rerun with WEBSHARD_FAULT_SEED=${plan.seed}): ${JSON.stringify(plan)}\n${detail}`;
    tally.failures.push(line);
    console.error(line);
  }
}

describe('fault injection', () => {
  const title =
    ONE_SEED === undefined
      ? `${RUNS} new seeds from ${SEED_BASE} and ${FAULT_REGRESSION_SEEDS.length} regression seeds`
      : `seed ${ONE_SEED}`;
  it(`every survivor fails fast naming the faulty rank (${title})`, async () => {
    if (ONE_SEED === undefined) {
      console.log(
        `fault injection: seeds ${SEED_BASE}..${SEED_BASE + RUNS - 1} (replay: WEBSHARD_FAULT_SEED_BASE=${SEED_BASE} WEBSHARD_FAULT_RUNS=${RUNS}) and the regression seeds ${FAULT_REGRESSION_SEEDS.map((entry) => entry.seed).join(', ')}`,
      );
    }
    const tally: Tally = {
      runs: 0,
      outcomes: { right: 0, 'wrong-blame': 0, 'wrong-error': 0, slow: 0, hang: 0 },
      byFault: Object.fromEntries(FAULT_KINDS.map((kind) => [kind, { runs: 0, right: 0 }])),
      byWorld: {},
      failures: [],
    };
    const plans = seeds().map(planOf);
    const inProcess = plans.filter((plan) => !plan.world.endsWith('-processes'));
    let next = 0;
    await Promise.all(
      Array.from({ length: CONCURRENT }, async () => {
        while (next < inProcess.length) await runOne(inProcess[next++]!, tally);
      }),
    );
    for (const plan of plans.filter((p) => p.world.endsWith('-processes'))) {
      await runOne(plan, tally);
    }
    console.log(
      `fault injection: ${tally.runs} runs, ${JSON.stringify(tally.outcomes)}, by fault ${JSON.stringify(tally.byFault)}, by world ${JSON.stringify(tally.byWorld)}`,
    );
    // The failures themselves are the message: CI's summary keeps only the assertion's text, and a
    // seed that is not in it cannot be replayed.
    expect(tally.failures.join('\n\n'), 'the seeds that failed').toBe('');
    expect(tally.outcomes.right).toBe(plans.length);
  }, 1_800_000);
});
