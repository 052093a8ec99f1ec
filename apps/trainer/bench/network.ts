/**
 * The trainer's step time between two simulated nodes: 2 launchers on this machine, each a node of
 * 2 threads over shm (`launch` as `webshard-run --nnodes 2 --node-rank K` runs them), the link
 * between them shaped by `WEBSHARD_LINK` ([Note: the link shaper] in @webshard/collectives) at
 * 1, 10 and 100 Gbit/s and 0.1, 1 and 10 ms, for `--strategy ddp` and `fsdp`, beside the same run
 * with no shaping. Each cell is the median step time of the steps after the first two (which
 * build buckets and warm up), rank 0's. Run: `pnpm --filter @webshard/trainer bench:network`
 * (`-- --quick` for one setting per axis).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { type BenchRow, writeBenchResults } from '@webshard/bench';
import { freePort, launch } from '@webshard/collectives/node';

const CLI = join(import.meta.dirname, '..', 'src', 'cli.ts');
const STEPS = 6;
const BATCH = 4;
const BLOCK = 16;
const TOKENS_PER_STEP = BATCH * BLOCK;
/**
 * Many parameters (3.2 M: 12.7 MB of f32 gradients) and little compute (one sequence of 16 tokens
 * per rank), so the link, not the CPU, is what a step waits for where it can.
 */
const MODEL = ['--n-layer', '4', '--n-head', '4', '--n-embd', '256', '--block-size', String(BLOCK)];

class Discard extends Writable {
  text = '';
  override _write(chunk: Buffer, _: BufferEncoding, done: () => void): void {
    this.text = (this.text + chunk.toString()).slice(-4000);
    done();
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** Median step time (ms) of a 2 x 2 run of `strategy` over `link`. */
async function stepMs(dir: string, strategy: 'ddp' | 'fsdp', link: string): Promise<number> {
  const log = join(dir, `${strategy}-${link.replace(/[^a-z0-9.]/g, '_')}.jsonl`);
  const port = await freePort();
  const out = new Discard();
  const args = [
    ...MODEL,
    ...['--batch-size', String(BATCH), '--steps', String(STEPS), '--sample-length', '0'],
    ...['--backend', 'cpu', '--strategy', strategy, '--transport', 'tcp', '--log-jsonl', log],
  ];
  const results = await Promise.all(
    [0, 1].map((node) =>
      launch({
        nprocPerNode: 2,
        nnodes: 2,
        nodeRank: node,
        masterPort: port,
        token: 'network-bench',
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
  if (results.some((r) => r.exitCode !== 0)) throw new Error(`${strategy} ${link}:\n${out.text}`);
  const steps = (await readFile(log, 'utf8'))
    .trim()
    .split('\n')
    // The log has tokens per second; a step is --batch-size x --block-size tokens.
    .map(
      (line) =>
        (TOKENS_PER_STEP * 1000) /
        (JSON.parse(line) as { tokensPerSecond: number }).tokensPerSecond,
    );
  return median(steps.slice(2));
}

const quick = process.argv.includes('--quick');
const rates = quick ? [10] : [1, 10, 100];
const latencies = quick ? [1] : [0.1, 1, 10];
const dir = await mkdtemp(join(tmpdir(), 'webshard-network-bench-'));
const rows: BenchRow[] = [];
try {
  for (const strategy of ['ddp', 'fsdp'] as const) {
    // Unshaped first and last: the machine's drift over the cells shows between the two.
    const before = await stepMs(dir, strategy, 'none');
    const cells: { name: string; ms: number }[] = [];
    for (const gbit of rates) {
      for (const latency of latencies) {
        const link = `latency=${latency}ms,bandwidth=${gbit}gbit`;
        const ms = await stepMs(dir, strategy, link);
        console.log(`${strategy} ${link}: ${ms.toFixed(0)} ms`);
        cells.push({ name: `${strategy} 2 nodes x 2 threads, ${gbit} Gbit/s, ${latency} ms`, ms });
      }
    }
    const after = await stepMs(dir, strategy, 'none');
    const base = (before + after) / 2;
    console.log(
      `${strategy} unshaped: ${before.toFixed(0)} ms before, ${after.toFixed(0)} ms after`,
    );
    for (const [when, ms] of [
      ['before', before],
      ['after', after],
    ] as const) {
      rows.push({
        name: `${strategy} 2 nodes x 2 threads, unshaped loopback (${when} the cells)`,
        metric: 'step',
        value: Math.round(ms),
        unit: 'ms',
      });
    }
    for (const cell of cells) {
      rows.push({
        name: cell.name,
        metric: 'step',
        value: Math.round(cell.ms),
        unit: 'ms',
        peer: 'unshaped (mean of before and after)',
        peerValue: Math.round(base),
      });
    }
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
writeBenchResults('trainer-network', rows);
