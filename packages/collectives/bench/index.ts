// The collectives benchmark: bus bandwidth (nccl-tests formulas) of all-reduce, all-gather,
// reduce-scatter and broadcast at 1, 16 and 64 MiB on 2 and 4 ranks over shm, ws and tcp, beside
// PyTorch gloo measured in the same run, and the bound raw sockets set on a 2-rank all-reduce.
// `pnpm bench` (or `tsx bench/index.ts --worlds 2 --transports tcp --sizes 1` for a quick look;
// `--ops allReduce,allReduceRegistered` picks ops).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type BenchRow, timeMedian, writeBenchResults } from '@webshard/bench';
import { freePort } from '../src/launcher/launcher.js';
import { launchThreads } from '../src/transports/shm/launch-threads.js';
import { browserRankRows } from './browser-ranks.js';
import { type GlooResults, glooKey, glooPeer, runGloo } from './gloo.js';
import { loopbackExchangeMs } from './loopback.js';
import { overlapRows } from './overlap.js';
import { type AbResult, runTwoLevel, runTwoLevelAb } from './two-level.js';
import { webGpuOperandRows } from './webgpu-operands.js';
import {
  BENCH_OPS,
  type BenchOp,
  type BenchPlan,
  type BenchResult,
  busFactor,
  REGISTERED_OPS,
} from './plan.js';

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, '..', '..', '..');
const MiB = 1 << 20;

function option(name: string, fallback: string): string[] {
  const index = process.argv.indexOf(`--${name}`);
  return (index >= 0 ? (process.argv[index + 1] ?? fallback) : fallback).split(',');
}

// `two-level`: 2 simulated nodes of world / 2 threads each (even worlds of 4 and up);
// `two-level-slots` (not by default): the same with the node's phases in rounds through the
// arena's slots, the schedule before [Note: two-level node phases on staged memory];
// `two-level-ab` (not by default): both, interleaved iteration by iteration, with CPU per op.
const transports = option('transports', 'shm,ws,tcp,two-level');
const worlds = option('worlds', '2,4').map(Number);
const sizesMiB = option('sizes', '1,16,64').map(Number);
const allOps: readonly BenchOp[] = [...BENCH_OPS, ...REGISTERED_OPS];
const ops = option('ops', allOps.join(',')) as BenchOp[];
for (const op of ops) {
  if (!allOps.includes(op))
    throw new Error(`--ops: unknown op '${op}' (expected ${allOps.join(', ')})`);
}
const plan: BenchPlan = {
  ops: ops.filter((op) => !REGISTERED_OPS.includes(op)),
  sizesMiB,
  warmup: 3,
};
const registeredOps = ops.filter((op) => REGISTERED_OPS.includes(op));
/**
 * The ops that run in two levels (broadcast is the flat chain over the same links), registered
 * buffers included (in the node's arena).
 */
const twoLevelPlan: BenchPlan = {
  ...plan,
  ops: [...plan.ops.filter((op) => op !== 'broadcast'), ...registeredOps],
};

async function runNetwork(backend: string, world: number): Promise<BenchResult[]> {
  const port = await freePort();
  const script = join(here, 'net-rank.ts');
  // Registered buffers run in place on tcp (ordinary arrays on ws).
  const netPlan: BenchPlan =
    backend === 'tcp' ? { ...plan, ops: [...plan.ops, ...registeredOps] } : plan;
  const children = Array.from({ length: world }, (_, rank) => {
    const child = spawn(
      process.execPath,
      [
        '--conditions=@webshard/source',
        '--import',
        'tsx',
        script,
        backend,
        JSON.stringify(netPlan),
      ],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
        env: {
          ...process.env,
          RANK: String(rank),
          LOCAL_RANK: String(rank),
          WORLD_SIZE: String(world),
          MASTER_ADDR: '127.0.0.1',
          MASTER_PORT: String(port),
          WEBSHARD_TOKEN: 'bench',
        },
      },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    return new Promise<string>((resolve, reject) =>
      child.on('close', (code) =>
        code === 0 ? resolve(out) : reject(new Error(`${backend} rank ${rank} exited ${code}`)),
      ),
    );
  });
  const outputs = await Promise.all(children);
  const line = outputs[0]!.split('\n').find((l) => l.startsWith('@@results '));
  if (line === undefined) throw new Error(`${backend}: rank 0 printed no results`);
  return JSON.parse(line.slice('@@results '.length)) as BenchResult[];
}

async function runShm(world: number): Promise<BenchResult[]> {
  const tsx = pathToFileURL(
    createRequire(import.meta.url)
      .resolve('tsx/esm/api')
      .replace(/\.cjs$/, '.mjs'),
  ).href;
  const worker = pathToFileURL(join(here, 'shm-rank.ts')).href;
  const bootstrap = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(worker)}); })`;
  const shmPlan: BenchPlan = { ...plan, ops: [...plan.ops, ...registeredOps] };
  const outcomes = await launchThreads<BenchPlan, BenchResult[]>(world, bootstrap, shmPlan, {
    eval: true,
    execArgv: ['--conditions=@webshard/source'],
    group: { timeoutMs: 120_000 },
  });
  const first = outcomes[0]!;
  if (first.status !== 'fulfilled') throw new Error(`shm rank 0: ${JSON.stringify(first)}`);
  return first.value;
}

/** The A/B rows: staged busbw against the slot schedule's, and each one's CPU per op. */
function abRows(world: number, results: readonly AbResult[]): BenchRow[] {
  const out: BenchRow[] = [];
  const shape = `2 nodes x ${world / 2} threads, shm + tcp`;
  for (const staged of results.filter((r) => r.variant === 'staged')) {
    const slots = results.find(
      (r) => r.variant === 'slots' && r.op === staged.op && r.sizeMiB === staged.sizeMiB,
    )!;
    const busbw = (r: AbResult) =>
      Math.round(((r.sizeMiB * MiB) / (r.medianMs / 1e3) / 1e6) * busFactor(r.op, world));
    const label = staged.op.endsWith('Registered')
      ? `${staged.op.replace('Registered', '')} (registered)`
      : staged.op;
    out.push({
      name: `${label} two-level staged, interleaved with the slot schedule (${shape}) ${staged.sizeMiB} MiB`,
      metric: 'busbw',
      value: busbw(staged),
      unit: 'MB/s',
      peer: 'slot schedule, same iterations',
      peerValue: busbw(slots),
    });
    for (const r of [staged, slots]) {
      out.push({
        name: `${label} two-level ${r.variant === 'staged' ? 'staged' : 'slot schedule'} (${shape}) ${r.sizeMiB} MiB: CPU per op, one node's process`,
        metric: 'cpu',
        value: Math.round(r.cpuMs),
        unit: 'ms',
      });
    }
  }
  return out;
}

const glooTorch = glooPeer(repoRoot);
if ('skipped' in glooTorch) console.log(`gloo peer skipped: ${glooTorch.skipped}`);
else console.log(`gloo peer: ${glooTorch.label} (${glooTorch.build.python})`);
/** A gloo row's peer label: the op and the PyTorch that ran it. */
const glooLabel = (op: string) =>
  'skipped' in glooTorch ? `gloo ${op}` : `gloo ${op}, ${glooTorch.label}`;

const rows: BenchRow[] = [];
// The machine's memory bandwidth, measured in the same run: every transport here is bound by copies
// (the shm arena's, the kernel's on loopback), and these machines differ by more than 2x in it.
for (const sizeMiB of [16, 64]) {
  const from = new Uint8Array(sizeMiB * MiB).fill(1);
  const to = new Uint8Array(sizeMiB * MiB);
  const ms = await timeMedian(() => to.set(from), { warmup: 2, iterations: 15 });
  rows.push({
    name: `memcpy ${sizeMiB} MiB (TypedArray.set, one thread)`,
    metric: 'bandwidth',
    value: Math.round((sizeMiB * MiB) / (ms / 1e3) / 1e6),
    unit: 'MB/s',
  });
}
for (const world of worlds) {
  let gloo: GlooResults | null = null;
  if (!('skipped' in glooTorch)) {
    console.log(`gloo, ${world} ranks...`);
    gloo = await runGloo(glooTorch, repoRoot, world, await freePort(), sizesMiB);
  }
  if (world === 2 && transports.includes('tcp') && sizesMiB.includes(16)) {
    // Issue 48: a 16 MiB all-reduce issued before a kernel that never yields, on the rank's thread
    // against the communication worker, interleaved in one pair of processes (overlap.ts).
    rows.push(...(await overlapRows(16)));
  }
  if (world === 2 && transports.includes('tcp')) {
    // The floor under any 2-rank all-reduce over Node sockets on this machine (see loopback.ts).
    for (const sizeMiB of sizesMiB) {
      const ms = 2 * (await loopbackExchangeMs((sizeMiB * MiB) / 2));
      const row: BenchRow = {
        name: `allReduce bound: raw node:net exchanges 2 ranks ${sizeMiB} MiB`,
        metric: 'busbw',
        value: Math.round((sizeMiB * MiB) / (ms / 1e3) / 1e6),
        unit: 'MB/s',
      };
      const peerValue = gloo?.get(glooKey('allReduce', sizeMiB));
      if (peerValue !== undefined) Object.assign(row, { peer: glooLabel('allReduce'), peerValue });
      rows.push(row);
    }
  }
  for (const transport of transports) {
    const twoLevel = transport === 'two-level' || transport === 'two-level-slots';
    if (twoLevel && (world < 4 || world % 2 !== 0)) continue;
    console.log(`${transport}, ${world} ranks...`);
    if (transport === 'two-level-ab') {
      if (world < 4 || world % 2 !== 0) continue;
      try {
        rows.push(...abRows(world, await runTwoLevelAb(world, twoLevelPlan)));
      } catch (error) {
        console.error(`${transport}, ${world} ranks failed: ${(error as Error).message}`);
      }
      continue;
    }
    let results: BenchResult[];
    try {
      results =
        transport === 'shm'
          ? await runShm(world)
          : twoLevel
            ? await runTwoLevel(world, twoLevelPlan, transport === 'two-level-slots')
            : await runNetwork(transport, world);
    } catch (error) {
      // One transport failing must not lose the others' rows: say so and go on.
      console.error(`${transport}, ${world} ranks failed: ${(error as Error).message}`);
      continue;
    }
    for (const result of results) {
      const bytes = result.sizeMiB * MiB;
      const busbw = (bytes / (result.medianMs / 1e3) / 1e6) * busFactor(result.op, world);
      // Registered ops against gloo's ordinary ones. gloo 1.13 has no reduce-scatter: there,
      // compare with its all-reduce, which a data-parallel library on gloo would use instead.
      const base = result.op.replace('Registered', '') as BenchOp;
      const noGlooOp = !(gloo?.has(glooKey(base, result.sizeMiB)) ?? false);
      const peerOp = base === 'reduceScatter' && noGlooOp ? 'allReduce' : base;
      const peerValue = gloo?.get(glooKey(peerOp, result.sizeMiB));
      const label = result.op.endsWith('Registered')
        ? `${result.op.replace('Registered', '')} (registered)`
        : result.op;
      const row: BenchRow = {
        name: twoLevel
          ? `${label} ${transport} (2 nodes x ${world / 2} threads, shm + tcp) ${result.sizeMiB} MiB`
          : `${label} ${transport} ${world} ranks ${result.sizeMiB} MiB`,
        metric: 'busbw',
        value: Math.round(busbw),
        unit: 'MB/s',
      };
      if (peerValue !== undefined) {
        row.peer = glooLabel(peerOp === base ? peerOp : 'all_reduce');
        row.peerValue = peerValue;
      }
      rows.push(row);
    }
  }
}
// Browser tabs as ws ranks beside Node ranks (the relay between tabs included), up to 16 MiB.
if (transports.includes('ws'))
  rows.push(...(await browserRankRows(sizesMiB.filter((s) => s <= 16))));
// All-gather of WebGPU tensors, host copies counted (`local`: WebGPU cannot run in worker threads).
rows.push(...(await webGpuOperandRows(sizesMiB.filter((s) => s >= 16))));
writeBenchResults('collectives', rows);
