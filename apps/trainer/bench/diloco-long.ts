/**
 * The long DiLoCo run of issue 46: the loss each outer compression reaches against DDP's at equal
 * tokens, on a GPT of at least 10 M parameters (nanoGPT's Shakespeare-char shape by default: 6
 * layers, 6 heads, 384 wide, 10.7 M parameters with the trainer's character vocabulary), after
 * at least 20 outer steps (H = 50, 1000 steps). Only the loss is measured, so the 4 ranks of each
 * run share one thread (`--transport local`: the bits of a DiLoCo run do not depend on the
 * transport or the load) and `--jobs` runs go side by side, one core each. Prints the held-out
 * loss of each run against DDP's and writes `trainer-diloco-long` bench rows.
 * Run: `pnpm --filter @webshard/trainer bench:diloco-long` (`-- --steps 200 --inner-steps 10` for a
 * shorter one, `-- --variants int8,topk` for some of the DiLoCo runs (DDP always runs), `-- --seed
 * 7`, `-- --jobs 1`, `-- --outer-lr 1 --outer-momentum 0` for every DiLoCo run's outer optimizer). About 30 minutes of one core a run on the 2-core machine this was written on.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { type BenchRow, writeBenchResults } from '@webshard/bench';

const CLI = join(import.meta.dirname, '..', 'src', 'cli.ts');

function flag(name: string, fallback: string): string {
  const index = process.argv.indexOf(`--${name}`);
  return index >= 0 ? process.argv[index + 1]! : fallback;
}

const steps = Number(flag('steps', '1000'));
const innerSteps = Number(flag('inner-steps', '50'));
const seed = flag('seed', '1337');
const jobs = Number(flag('jobs', '2'));
const compressions = flag('variants', 'f32,int8,int4,topk').split(',');
// The outer optimizer for every DiLoCo run, where given (each compression's default otherwise).
const OUTER = [
  ...(process.argv.includes('--outer-lr') ? ['--outer-lr', flag('outer-lr', '')] : []),
  ...(process.argv.includes('--outer-momentum')
    ? ['--outer-momentum', flag('outer-momentum', '')]
    : []),
];
const MODEL = [
  ...['--n-layer', flag('n-layer', '6'), '--n-head', flag('n-head', '6')],
  ...['--n-embd', flag('n-embd', '384'), '--block-size', flag('block-size', '32')],
  ...['--batch-size', flag('batch-size', '8')],
];
const COMMON = [
  ...MODEL,
  ...['--world-size', '4', '--transport', 'local', '--backend', 'cpu', '--sample-length', '0'],
  ...['--steps', String(steps), '--seed', seed],
];

interface Run {
  name: string;
  args: string[];
}
// `--ddp-loss X` takes DDP's loss from an earlier run of the same shape and seed instead of
// training it again (DDP's bits depend only on those).
const knownDdpLoss = process.argv.includes('--ddp-loss') ? Number(flag('ddp-loss', '')) : undefined;
const runs: Run[] = [
  ...(knownDdpLoss === undefined ? [{ name: 'DDP', args: ['--strategy', 'ddp'] }] : []),
  ...compressions.map((c) => ({
    name: `DiLoCo H=${innerSteps}, ${c}${OUTER.length > 0 ? ` (${OUTER.join(' ')})` : ''}`,
    args: [
      ...['--strategy', 'diloco', '--inner-steps', String(innerSteps), '--outer-compression', c],
      ...OUTER,
    ],
  })),
];

interface Result {
  loss: number;
  parameters: number;
  seconds: number;
}

/** One run in a process of its own: its held-out loss at the end, from what it printed. */
function train(run: Run): Promise<Result> {
  const started = performance.now();
  const child = spawn(
    process.execPath,
    ['--conditions=@webshard/source', '--import', 'tsx', CLI, ...COMMON, ...run.args],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  // The head (the parameter count) and the last 20 000 characters (the held-out loss, errors).
  let head = '';
  let text = '';
  const keep = (chunk: Buffer) => {
    if (head.length < 4000) head += chunk.toString();
    text = (text + chunk.toString()).slice(-20_000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  return new Promise((resolve, reject) => {
    child.on('close', (code) => {
      const loss = Number(/held-out loss ([\d.]+)/.exec(text)?.[1] ?? Number.NaN);
      if (code !== 0 || !Number.isFinite(loss)) {
        reject(new Error(`${run.name} exited with ${code}:\n${text.slice(-4000)}`));
        return;
      }
      const parameters = Number(/model: gpt, (\d+) parameters/.exec(head)?.[1] ?? Number.NaN);
      resolve({ loss, parameters, seconds: (performance.now() - started) / 1000 });
    });
  });
}

const results = new Map<string, Result>();
if (knownDdpLoss !== undefined)
  results.set('DDP', { loss: knownDdpLoss, parameters: 0, seconds: 0 });
const queue = [...runs];
await Promise.all(
  Array.from({ length: jobs }, async () => {
    for (let run = queue.shift(); run !== undefined; run = queue.shift()) {
      const result = await train(run);
      results.set(run.name, result);
      console.log(
        `${run.name}: held-out loss ${result.loss.toFixed(4)} after ${steps} steps (${result.parameters} parameters, ${result.seconds.toFixed(0)} s)`,
      );
    }
  }),
);

const ddp = results.get('DDP')!;
const shape = `GPT ${MODEL.filter((_, i) => i % 2 === 1).join('/')} (layers/heads/width/block/batch), 4 ranks, ${steps} steps, seed ${seed}`;
const rows: BenchRow[] = [];
console.log(`\n| run | held-out loss | against DDP |\n| --- | --- | --- |`);
for (const run of [{ name: 'DDP', args: [] }, ...runs.filter((r) => r.name !== 'DDP')]) {
  const { loss } = results.get(run.name)!;
  const against = run.name === 'DDP' ? '' : `${(100 * (loss / ddp.loss - 1)).toFixed(1)} %`;
  console.log(`| ${run.name} | ${loss.toFixed(4)} | ${against} |`);
  rows.push({
    name: `diloco long: ${run.name}, ${shape}, held-out loss at the end`,
    metric: 'loss',
    value: Number(loss.toFixed(4)),
    unit: 'nats',
    better: 'lower',
    ...(run.name === 'DDP' ? {} : { peer: 'DDP', peerValue: Number(ddp.loss.toFixed(4)) }),
  });
}
writeBenchResults('trainer-diloco-long', rows);
