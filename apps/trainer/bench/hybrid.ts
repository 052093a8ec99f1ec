/**
 * Which sharding to pick across machines: the trainer on 2 simulated nodes x 2 threads (two
 * `launch`es in this process, as `webshard-run --nnodes 2 --node-rank K` runs them: shm inside a
 * node, tcp between), a GPT of 24 M parameters, `--strategy fsdp --sharding full` (FULL_SHARD over
 * all 4 ranks, its gathers crossing the link) against `--sharding hybrid` (HYBRID_SHARD: sharded
 * inside a node, gradient shards all-reduced across) against `--strategy ddp`, on a `datacenter`
 * link (the preset: 50 us, 10 Gbit/s) and a slow one (`broadband-100`: 20 ms, 100 Mbit/s), shaped by `WEBSHARD_LINK`
 * ([Note: the link shaper] in @webshard/collectives). Per cell: tokens/s (median of the steps after
 * the first two), rank 0's peak memory (the allocator's peak plus that of registered collective
 * buffers, which live outside it: an upper bound), and the
 * bytes the process wrote to sockets per step, which on this layout are the bytes sent across the
 * link: shm moves none through the kernel, so `/proc/self/io`'s `wchar` counts the network
 * transport, the rendezvous and the logs; the difference between a run of `LONG` and one of
 * `SHORT` steps, over `LONG - SHORT`, leaves start-up, evaluation and logs out. Run:
 * `pnpm --filter @webshard/trainer bench:hybrid` (Linux: it reads /proc).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { type BenchRow, writeBenchResults } from '@webshard/bench';
import { freePort, launch } from '@webshard/collectives/node';

const CLI = join(import.meta.dirname, '..', 'src', 'cli.ts');
const SHORT = 3;
const LONG = 9;
const BATCH = 4;
const BLOCK = 16;
/** 6 blocks of 576: 23.9 M parameters (about 96 MB of f32 gradients), one sequence per rank. */
const MODEL = ['--n-layer', '6', '--n-head', '8', '--n-embd', '576', '--block-size', String(BLOCK)];
/** `WEBSHARD_LINK` presets ([Note: link presets] in @webshard/collectives). */
const LINKS = { datacenter: 'datacenter', slow: 'broadband-100' } as const;
const SETUPS = {
  'FULL_SHARD across nodes': ['--strategy', 'fsdp', '--sharding', 'full'],
  HYBRID_SHARD: ['--strategy', 'fsdp', '--sharding', 'hybrid'],
  DDP: ['--strategy', 'ddp'],
} as const;

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

/** Bytes this process has written (files and sockets) so far. */
async function writtenBytes(): Promise<number> {
  const io = await readFile('/proc/self/io', 'utf8');
  return Number(/^wchar: (\d+)$/m.exec(io)![1]);
}

interface Run {
  tokensPerSecond: number;
  peakBytes: number;
  written: number;
}

/** One 2 x 2 run of `setup` over `link` for `steps` steps. */
async function run(
  dir: string,
  setup: readonly string[],
  link: string,
  steps: number,
): Promise<Run> {
  const log = join(dir, `${setup.join('-')}-${link.replace(/[^a-z0-9.]/g, '_')}-${steps}.jsonl`);
  const port = await freePort();
  const out = new Discard();
  const args = [
    ...MODEL,
    ...['--batch-size', String(BATCH), '--steps', String(steps), '--sample-length', '0'],
    ...['--backend', 'cpu', '--transport', 'tcp', '--log-jsonl', log, ...setup],
  ];
  const before = await writtenBytes();
  const results = await Promise.all(
    [0, 1].map((node) =>
      launch({
        nprocPerNode: 2,
        nnodes: 2,
        nodeRank: node,
        masterPort: port,
        token: 'hybrid-bench',
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
  const written = (await writtenBytes()) - before;
  if (results.some((r) => r.exitCode !== 0)) throw new Error(`${setup} ${link}:\n${out.text}`);
  const lines = (await readFile(log, 'utf8'))
    .trim()
    .split('\n')
    .map(
      (line) =>
        JSON.parse(line) as {
          tokensPerSecond: number;
          peakDeviceBytes: number;
          peakExternalBytes?: number;
        },
    );
  return {
    tokensPerSecond: median(lines.slice(2).map((l) => l.tokensPerSecond)),
    // The allocator's peak plus that of registered collective buffers (outside it): an upper
    // bound, the two peaks need not coincide.
    peakBytes: Math.max(...lines.map((l) => l.peakDeviceBytes + (l.peakExternalBytes ?? 0))),
    written,
  };
}

const dir = await mkdtemp(join(tmpdir(), 'webshard-hybrid-bench-'));
const rows: BenchRow[] = [];
try {
  for (const [name, setup] of Object.entries(SETUPS)) {
    // The bytes do not depend on the link: measured once, on the datacenter link.
    const short = await run(dir, setup, LINKS.datacenter, SHORT);
    for (const [linkName, link] of Object.entries(LINKS)) {
      const long = await run(dir, setup, link, LONG);
      const label = `hybrid bench: ${name}, 2 nodes x 2, ${linkName} link`;
      console.log(
        `${label}: ${long.tokensPerSecond.toFixed(0)} tokens/s, peak ${(long.peakBytes / 2 ** 20).toFixed(0)} MiB`,
      );
      rows.push({
        name: label,
        metric: 'tokens/s',
        value: Math.round(long.tokensPerSecond),
        unit: 'tokens/s',
      });
      rows.push({
        name: label,
        metric: 'rank 0 peak (allocator + registered)',
        value: Math.round(long.peakBytes / 2 ** 20),
        unit: 'MiB',
      });
      if (linkName === 'datacenter') {
        const perStep = (long.written - short.written) / (LONG - SHORT);
        console.log(`${label}: ${(perStep / 2 ** 20).toFixed(1)} MiB written per step`);
        rows.push({
          name: `hybrid bench: ${name}, 2 nodes x 2`,
          metric: 'bytes across the link per step',
          value: Math.round(perStep / 2 ** 20),
          unit: 'MiB',
        });
      }
    }
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
writeBenchResults('trainer-hybrid', rows);
