// The ddp-buckets benchmark: step time (forward + backward + gradient all-reduce) of a deep MLP
// on 2 ranks over shm and tcp, with buckets overlapped with backward and with `delayAllreduce`,
// against the same per-rank step with no communication at all (one process, no wrapper), and the
// share of communication hidden behind backward = (T_delay - T_overlap) / (T_delay - T_nocomm).
// `pnpm bench` (`--transports shm` for one transport; `tcp-worker` and `shm-worker` are tcp and
// shm with each rank's communication on its worker, `initProcessGroup({ progress: 'worker' })`:
// shm's ranks then are webshard-run's thread ranks, `launch({ ranksAs: 'threads' })`).
import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type BenchRow, writeBenchResults } from '@webshard/bench';
import { PassThrough } from 'node:stream';
import { launch, launchThreads } from '@webshard/collectives/node';
import { freePortForBench } from './port.js';
import { runPlan, type StepPlan, type StepResult } from './step.js';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const tsx = pathToFileURL(require.resolve('tsx/esm/api').replace(/\.cjs$/, '.mjs')).href;

function option(name: string, fallback: string): string[] {
  const index = process.argv.indexOf(`--${name}`);
  return (index >= 0 ? (process.argv[index + 1] ?? fallback) : fallback).split(',');
}

const transports = option('transports', 'shm,shm-worker,tcp,tcp-worker');
const base: Omit<StepPlan, 'mode'> = {
  layers: Number(option('layers', '8')[0]),
  width: Number(option('width', '512')[0]),
  rows: Number(option('rows', '4')[0]),
  messageSize: Number(option('message-size', String(512 * 512 + 512))[0]),
  iterations: Number(option('iterations', '9')[0]),
};

async function shm(plan: StepPlan): Promise<StepResult[]> {
  const worker = pathToFileURL(join(here, 'shm-rank.ts')).href;
  const bootstrap = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(worker)}); })`;
  const outcomes = await launchThreads<StepPlan, StepResult[]>(2, bootstrap, plan, {
    eval: true,
    execArgv: ['--conditions=@webshard/source'],
    group: { timeoutMs: 120_000 },
  });
  return slowest(
    outcomes.map((o) => (o.status === 'fulfilled' ? o.value : failed(JSON.stringify(o)))),
  );
}

/** shm with each rank's rings on its communication worker: webshard-run's thread ranks. */
async function shmWorker(plan: StepPlan): Promise<StepResult[]> {
  let text = '';
  const out = new PassThrough();
  out.on('data', (chunk: Buffer) => {
    text += chunk.toString();
  });
  const result = await launch({
    nprocPerNode: 2,
    ranksAs: 'threads',
    script: join(here, 'net-rank.ts'),
    args: [JSON.stringify(plan), 'worker'],
    stdout: out,
    stderr: new PassThrough(),
    forwardSignals: false,
    execArgv: ['--conditions=@webshard/source'],
  });
  const tag = '@@result ';
  const lines = text.split('\n').filter((line) => line.includes(tag));
  if (result.exitCode !== 0 || lines.length !== 2) failed(`shm-worker ${JSON.stringify(result)}`);
  return slowest(lines.map((line) => JSON.parse(line.slice(line.indexOf(tag) + tag.length))));
}

async function tcp(
  plan: StepPlan,
  progress: 'thread' | 'worker' = 'thread',
): Promise<StepResult[]> {
  const port = await freePortForBench();
  const results = await Promise.all(
    [0, 1].map(
      (rank) =>
        new Promise<StepResult[]>((resolve, reject) => {
          const child = spawn(
            process.execPath,
            [
              '--conditions=@webshard/source',
              '--import',
              'tsx',
              join(here, 'net-rank.ts'),
              JSON.stringify(plan),
              progress,
            ],
            {
              stdio: ['ignore', 'pipe', 'inherit'],
              env: {
                ...process.env,
                RANK: String(rank),
                LOCAL_RANK: String(rank),
                // As torchrun and webshard-run set it: each rank's matmul takes its share of the
                // cores ([Note: threads per process] in tensor-core).
                LOCAL_WORLD_SIZE: '2',
                WORLD_SIZE: '2',
                MASTER_ADDR: '127.0.0.1',
                MASTER_PORT: String(port),
                WEBSHARD_TOKEN: 'ddp-bench',
              },
            },
          );
          let out = '';
          child.stdout.on('data', (chunk: Buffer) => {
            out += chunk.toString();
          });
          child.on('exit', (code) => {
            const line = out.split('\n').find((l) => l.startsWith('@@result '));
            if (code !== 0 || line === undefined)
              reject(new Error(`tcp rank ${rank} exited ${code}`));
            else resolve(JSON.parse(line.slice('@@result '.length)));
          });
        }),
    ),
  );
  return slowest(results);
}

/** Per result, the slowest rank's (its step, and the longest wait). */
function slowest(ranks: StepResult[][]): StepResult[] {
  return ranks[0]!.map((_, i) => {
    const results = ranks.map((r) => r[i]!);
    const worst = results.reduce((a, b) => (b.ms > a.ms ? b : a));
    return { ...worst, waitMs: Math.max(...results.map((r) => r.waitMs)) };
  });
}

function failed(detail: string): never {
  throw new Error(`a benchmark rank failed: ${detail}`);
}

const rows: BenchRow[] = [];
const name = `MLP ${base.layers}x${base.width}, ${base.rows} rows/rank`;
const [nocomm] = (await runPlan(null, { ...base, mode: 'nocomm' })) as [StepResult];
rows.push({
  name: `${name}, 1 rank, no communication`,
  metric: 'step time',
  value: nocomm.ms,
  unit: 'ms',
});
for (const transport of transports) {
  const run =
    transport === 'shm'
      ? shm
      : transport === 'shm-worker'
        ? shmWorker
        : transport === 'tcp-worker'
          ? (plan: StepPlan) => tcp(plan, 'worker')
          : (plan: StepPlan) => tcp(plan);
  // The three modes interleaved step by step on one group ([Note: the ddp bench's paired steps]).
  const [delay, overlap, auto] = (await run({ ...base, mode: 'paired' })) as [
    StepResult,
    StepResult,
    StepResult,
  ];
  const label = `${name}, 2 ranks ${transport.endsWith('-worker') ? `${transport.slice(0, -7)} (progress: 'worker')` : transport}`;
  // Both ranks compute at once without sending anything: what sharing 2 cores costs by itself.
  const [contended] = (await run({ ...base, mode: 'nocomm' })) as [StepResult];
  rows.push({
    name: `${label}, no communication (ranks share the cores)`,
    metric: 'step time',
    value: contended.ms,
    unit: 'ms',
  });
  rows.push({
    name: `${label}, one all-reduce of all gradients alone`,
    metric: 'time',
    value: delay.allReduceMs,
    unit: 'ms',
  });
  rows.push({ name: `${label}, delayAllreduce`, metric: 'step time', value: delay.ms, unit: 'ms' });
  console.log(
    `${label}: delay ${delay.ms.toFixed(0)} ms, overlap ${overlap.ms.toFixed(0)} ms, auto ${auto.ms.toFixed(0)} ms (chose ${auto.chosen}); load average ${loadavg()[0]!.toFixed(1)}`,
  );
  rows.push({
    name: `${label}, overlapped (${overlap.buckets} buckets)`,
    metric: 'step time',
    value: overlap.ms,
    unit: 'ms',
    peer: 'delayAllreduce',
    peerValue: delay.ms,
  });
  rows.push({
    name: `${label}, delayAllreduce 'auto' (the trainer's default; chose ${auto.chosen})`,
    metric: 'step time',
    value: auto.ms,
    unit: 'ms',
    peer: 'delayAllreduce',
    peerValue: delay.ms,
  });
  rows.push({
    name: `${label}, communication hidden behind backward`,
    metric: '(T_delay - T_overlap) / (T_delay - T_nocomm)',
    value: (100 * (delay.ms - overlap.ms)) / (delay.ms - nocomm.ms),
    unit: '%',
  });
  rows.push({
    name: `${label}, end of backward waiting for communication, delayAllreduce`,
    metric: 'time',
    value: delay.waitMs,
    unit: 'ms',
  });
  rows.push({
    name: `${label}, end of backward waiting for communication, overlapped`,
    metric: 'time',
    value: overlap.waitMs,
    unit: 'ms',
    peer: 'delayAllreduce',
    peerValue: delay.waitMs,
  });
  rows.push({
    name: `${label}, communication hidden, from the waits`,
    metric: '(W_delay - W_overlap) / W_delay',
    value: (100 * (delay.waitMs - overlap.waitMs)) / delay.waitMs,
    unit: '%',
  });
  rows.push({
    name: `${label}, hidden, against 2 ranks without communication`,
    metric: '(T_delay - T_overlap) / (T_delay - T_nocomm,2)',
    value: (100 * (delay.ms - overlap.ms)) / (delay.ms - contended.ms),
    unit: '%',
  });
}
writeBenchResults('ddp-buckets', rows);
