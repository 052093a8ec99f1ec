import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { freePort, launch } from '@webshard/collectives/node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CliFixture,
  FIXTURES,
  maxRelativeGap,
  readCliFixture,
} from '../test-support/fixtures.js';

const CLI = join(import.meta.dirname, '..', 'cli.ts');
const STEPS = 4;

let fixture: CliFixture;
let out: string;
beforeAll(async () => {
  fixture = await readCliFixture();
  out = await mkdtemp(join(tmpdir(), 'webshard-two-nodes-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

class Collect extends Writable {
  text = '';
  override _write(chunk: Buffer, _: BufferEncoding, done: () => void): void {
    this.text += chunk.toString();
    done();
  }
}

describe('two nodes of threads (two launchers on this machine)', () => {
  const rows: ['ddp' | 'fsdp', string[]][] = [
    ['ddp', []],
    ['fsdp', []],
    // Sharded inside each node (LOCAL_WORLD_SIZE 2), gradient shards all-reduced across.
    ['fsdp', ['--sharding', 'hybrid']],
  ];
  for (const [strategy, extra] of rows) {
    it(`${[strategy, ...extra].join(' ')}: 2 nodes x 2 threads train with the losses of PyTorch's one-node run`, async () => {
      const log = join(out, `${[strategy, ...extra].join('-')}.jsonl`);
      const port = await freePort();
      const stdout = new Collect();
      const stderr = new Collect();
      // As `webshard-run --nproc-per-node 2 --nnodes 2 --node-rank K webshard-train ...` on
      // each node: the trainer in each thread joins the two-level world.
      const args = [
        ...fixture.flags,
        ...['--steps', String(STEPS), '--backend', 'cpu', '--strategy', strategy],
        ...['--transport', 'tcp', '--log-jsonl', log, ...extra],
      ];
      const results = await Promise.all(
        [0, 1].map((node) =>
          launch({
            nprocPerNode: 2,
            nnodes: 2,
            nodeRank: node,
            masterPort: port,
            token: 'two-nodes',
            script: CLI,
            args,
            ranksAs: 'threads',
            execArgv: ['--conditions=@webshard/source'],
            env: { INIT_CWD: FIXTURES },
            stdout,
            stderr,
            forwardSignals: false,
          }),
        ),
      );
      expect(
        results.map((r) => r.exitCode),
        stdout.text + stderr.text,
      ).toEqual([0, 0]);
      // Its threads run shm in each node and tcp between them: the label says so.
      expect(stdout.text).toContain(`[rank 0] strategy: ${strategy} on 4 rank(s) over shm+tcp`);
      const lines = (await readFile(log, 'utf8'))
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { loss: number; peakExternalBytes: number });
      const losses = lines.map((l) => l.loss);
      // FSDP's flat buffers, registered on the world group, are outside the allocator, counted
      // beside it; hybrid's sub-groups register none, nor do DDP's buckets.
      const external = lines.at(-1)!.peakExternalBytes;
      if (strategy === 'fsdp' && extra.length === 0) expect(external).toBeGreaterThan(0);
      else expect(external).toBe(0);
      expect(losses).toHaveLength(STEPS);
      expect(maxRelativeGap(losses, fixture.losses.slice(0, STEPS))).toBeLessThan(1e-5);
      // Starting 4 threads in 2 launchers and compiling the trainer takes most of it.
    }, 240_000);
  }
});
