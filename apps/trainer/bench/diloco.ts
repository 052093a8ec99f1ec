/**
 * DiLoCo against DDP across simulated internet links: the trainer's GPT on 4 ranks, each a node of
 * its own (4 launchers on this machine, `webshard-run --nnodes 4`), every link between them shaped
 * by `WEBSHARD_LINK` (the presets `broadband-20` and `broadband-100`, [Note: link presets] in
 * @webshard/collectives) or left as loopback. For `--strategy ddp`, `diloco --inner-steps 50` in
 * f32 and in int8, the same steps, batches and seed: tokens/s over the whole run (the outer syncs
 * included) against the same strategy on loopback; bytes each rank sends per token the job trains
 * against DDP's; the held-out loss at the end against DDP's on loopback. DDP's bytes are the ring
 * all-reduce's volume of its gradients, 2 (n - 1) / n x 4 bytes a parameter a step (nominal);
 * DiLoCo's are what its syncs report (the JSONL's `outerBytesSent`, rank 0's).
 * Run: `pnpm --filter @webshard/trainer bench:diloco` (`-- --steps 100 --n-embd 128` to change the
 * run; `-- --quick` for 50 steps on broadband-20 only).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { type BenchRow, writeBenchResults } from '@webshard/bench';
import { freePort, launch } from '@webshard/collectives/node';

const CLI = join(import.meta.dirname, '..', 'src', 'cli.ts');
const RANKS = 4;
const quick = process.argv.includes('--quick');

function flag(name: string, fallback: number): number {
  const index = process.argv.indexOf(`--${name}`);
  return index >= 0 ? Number(process.argv[index + 1]) : fallback;
}

const STEPS = flag('steps', quick ? 50 : 100);
const H = flag('inner-steps', 50);
const BATCH = flag('batch-size', 16);
const BLOCK = flag('block-size', 32);
const EMBD = flag('n-embd', 64);
const LAYERS = flag('n-layer', 2);
const TOKENS_PER_STEP = BATCH * BLOCK;

/** The first 4000 and the last 8000 characters a run printed. */
class Tail extends Writable {
  head = '';
  text = '';
  override _write(chunk: Buffer, _: BufferEncoding, done: () => void): void {
    if (this.head.length < 4000) this.head = (this.head + chunk.toString()).slice(0, 4000);
    this.text = (this.text + chunk.toString()).slice(-8000);
    done();
  }
}

interface Variant {
  name: string;
  args: string[];
}

const VARIANTS: Variant[] = [
  { name: 'DDP', args: ['--strategy', 'ddp'] },
  {
    name: `DiLoCo H=${H} f32`,
    args: ['--strategy', 'diloco', '--inner-steps', String(H), '--outer-compression', 'f32'],
  },
  {
    name: `DiLoCo H=${H} int8`,
    args: ['--strategy', 'diloco', '--inner-steps', String(H), '--outer-compression', 'int8'],
  },
];

interface Measured {
  tokensPerSecond: number;
  /** Bytes one rank sent per token the job trained. */
  bytesPerToken: number;
  heldOutLoss: number;
  parameters: number;
}

/** One run of `variant` over `link` on 4 one-rank nodes. */
async function measure(dir: string, variant: Variant, link: string): Promise<Measured> {
  const log = join(dir, `${variant.name}-${link}.jsonl`.replace(/[^A-Za-z0-9.-]/g, '_'));
  const port = await freePort();
  const outs = Array.from({ length: RANKS }, () => new Tail());
  const args = [
    ...['--n-layer', String(LAYERS), '--n-embd', String(EMBD), '--block-size', String(BLOCK)],
    ...['--batch-size', String(BATCH), '--steps', String(STEPS), '--sample-length', '0'],
    ...['--backend', 'cpu', '--transport', 'tcp', '--log-jsonl', log, ...variant.args],
  ];
  const results = await Promise.all(
    outs.map((out, node) =>
      launch({
        nprocPerNode: 1,
        nnodes: RANKS,
        nodeRank: node,
        masterPort: port,
        token: 'diloco-bench',
        script: CLI,
        args,
        ranksAs: 'threads',
        execArgv: ['--conditions=@webshard/source'],
        env: { WEBSHARD_LINK: link },
        stdout: out,
        stderr: out,
        forwardSignals: false,
      }),
    ),
  );
  if (results.some((r) => r.exitCode !== 0)) {
    throw new Error(`${variant.name} over ${link}:\n${outs.map((o) => o.text).join('\n---\n')}`);
  }
  const lines = (await readFile(log, 'utf8'))
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { tokensPerSecond: number; outerBytesSent?: number });
  const seconds = lines.reduce((s, l) => s + TOKENS_PER_STEP / l.tokensPerSecond, 0);
  const text = outs[0]!.text;
  const parameters = Number(/model: gpt, (\d+) parameters/.exec(outs[0]!.head)?.[1] ?? Number.NaN);
  const heldOutLoss = Number(/held-out loss ([\d.]+)/.exec(text)?.[1] ?? Number.NaN);
  const tokens = STEPS * TOKENS_PER_STEP;
  const sent = variant.args.includes('ddp')
    ? STEPS * ((2 * (RANKS - 1)) / RANKS) * 4 * parameters
    : lines.reduce((s, l) => s + (l.outerBytesSent ?? 0), 0);
  return {
    tokensPerSecond: tokens / seconds,
    bytesPerToken: sent / tokens,
    heldOutLoss,
    parameters,
  };
}

const links = quick ? ['none', 'broadband-20'] : ['none', 'broadband-100', 'broadband-20'];
const dir = await mkdtemp(join(tmpdir(), 'webshard-diloco-bench-'));
const rows: BenchRow[] = [];
const shape = `GPT ${LAYERS}x${EMBD}, ${RANKS} ranks, ${STEPS} steps of ${TOKENS_PER_STEP} tokens`;
try {
  const results = new Map<string, Measured>();
  for (const link of links) {
    for (const variant of VARIANTS) {
      const m = await measure(dir, variant, link);
      results.set(`${variant.name}|${link}`, m);
      console.log(
        `${variant.name} over ${link}: ${m.tokensPerSecond.toFixed(0)} tokens/s, ${m.bytesPerToken.toFixed(1)} B/token, held-out loss ${m.heldOutLoss.toFixed(4)} (${m.parameters} parameters)`,
      );
    }
  }
  const ddpLoopback = results.get('DDP|none')!;
  for (const variant of VARIANTS) {
    const loopback = results.get(`${variant.name}|none`)!;
    rows.push({
      name: `diloco bench: ${variant.name}, ${shape}, loopback`,
      metric: 'tokens/s',
      value: Math.round(loopback.tokensPerSecond),
      unit: 'tokens/s',
    });
    for (const link of links.filter((l) => l !== 'none')) {
      const m = results.get(`${variant.name}|${link}`)!;
      rows.push({
        name: `diloco bench: ${variant.name}, ${shape}, ${link}`,
        metric: 'tokens/s',
        value: Math.round(m.tokensPerSecond),
        unit: 'tokens/s',
        peer: `${variant.name} on loopback`,
        peerValue: Math.round(loopback.tokensPerSecond),
      });
    }
    rows.push({
      name: `diloco bench: ${variant.name}, ${shape}, bytes each rank sends per token`,
      metric: 'bytes/token',
      value: Number(loopback.bytesPerToken.toFixed(2)),
      unit: 'B',
      ...(variant.name === 'DDP'
        ? {}
        : { peer: 'DDP (ring volume)', peerValue: Number(ddpLoopback.bytesPerToken.toFixed(2)) }),
    });
    rows.push({
      name: `diloco bench: ${variant.name}, ${shape}, held-out loss at the end (loopback)`,
      metric: 'loss',
      value: Number(loopback.heldOutLoss.toFixed(4)),
      unit: 'nats',
      better: 'lower',
      ...(variant.name === 'DDP'
        ? {}
        : { peer: 'DDP on loopback', peerValue: Number(ddpLoopback.heldOutLoss.toFixed(4)) }),
    });
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
writeBenchResults('trainer-diloco', rows);
