import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { FsdpOptions } from './api.js';
import { trainSingle } from './test-support/parity.js';
import { rankLines, webshardRun } from './test-support/webshard-run.js';

const here = dirname(fileURLToPath(import.meta.url));
// 12 rows divide among 4 and 6 ranks.
const RUN = { steps: 3, batch: 12, nested: true };

interface RankOutput {
  rank: number;
  kind: string;
  losses: number[];
  params: Record<string, number[]>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** One `webshard-run` per simulated node, `perNode` thread ranks each; every rank's output. */
async function runNodes(
  transport: 'tcp' | 'ws',
  nodes: number,
  perNode: number,
  options: Omit<FsdpOptions, 'group'>,
): Promise<RankOutput[]> {
  const port = await freePort();
  const outputs = await Promise.all(
    Array.from({ length: nodes }, async (_, node) => {
      const run = await webshardRun([
        ...['--nproc-per-node', String(perNode), '--nnodes', String(nodes)],
        ...['--node-rank', String(node), '--master-addr', '127.0.0.1'],
        ...['--master-port', String(port), '--token', 'hybrid-test'],
        join(here, 'test-support', 'hybrid-rank.ts'),
        transport,
        JSON.stringify({ run: RUN, options }),
      ]);
      expect(run.code, `node ${node}: ${run.output}`).toBe(0);
      return run.stdout;
    }),
  );
  return rankLines<RankOutput>(outputs.join('\n'), 'RESULT');
}

function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, rtol: number): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const tol = rtol * Math.max(1, Math.abs(expected[i]!));
    if (!(Math.abs(actual[i]! - expected[i]!) <= tol)) {
      throw new Error(`element ${i}: ${actual[i]} vs ${expected[i]} (tolerance ${tol})`);
    }
  }
}

describe('HYBRID_SHARD on simulated nodes (shm inside a node, the network between)', () => {
  const cases: ['tcp' | 'ws', number, number][] = [
    ['tcp', 2, 2],
    ['ws', 2, 2],
    ['tcp', 3, 2],
    ['ws', 3, 2],
  ];
  for (const [transport, nodes, perNode] of cases) {
    it(`${nodes} nodes x ${perNode} over ${transport} train like one process`, async () => {
      const reference = await trainSingle(RUN);
      // No nodeSize: HYBRID_SHARD reads the launcher's LOCAL_WORLD_SIZE.
      const ranks = await runNodes(transport, nodes, perNode, { shardingStrategy: 'HYBRID_SHARD' });
      expect(ranks.map((r) => r.rank)).toEqual(
        Array.from({ length: nodes * perNode }, (_, r) => r),
      );
      expect(ranks[0]!.kind).toBe(`shm+${transport}`);
      const mean = reference.losses.map(
        (_, s) => ranks.reduce((sum, r) => sum + r.losses[s]!, 0) / ranks.length,
      );
      expectClose(mean, reference.losses, 1e-5);
      for (const rank of ranks) {
        for (const [name, values] of reference.params) {
          expectClose(rank.params[name]!, values, 1e-5);
        }
      }
    }, 60_000);
  }
});
