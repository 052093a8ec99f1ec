import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { trainSingle } from './test-support/parity.js';
import { rankLines, webshardRun } from './test-support/webshard-run.js';

const here = dirname(fileURLToPath(import.meta.url));
const RUN = { steps: 3, batch: 8, nested: true };

interface RankOutput {
  rank: number;
  losses: number[];
  params: Record<string, number[]>;
  stagedOps: number[];
}

async function runRanks(
  transport: 'tcp' | 'ws',
  world: number,
  group: { smallMessageBytes?: number } = {},
): Promise<RankOutput[]> {
  const run = await webshardRun([
    '--nproc-per-node',
    String(world),
    // On one node webshard-run starts threads over shm by default: processes use the transport.
    '--ranks-as',
    'processes',
    join(here, 'test-support', 'net-rank.ts'),
    transport,
    JSON.stringify({ ...RUN, group }),
  ]);
  expect(run.code, run.output).toBe(0);
  return rankLines<RankOutput>(run.stdout, 'RESULT');
}

describe('FSDP over processes (webshard-run)', () => {
  for (const transport of ['tcp', 'ws'] as const) {
    it(`2 ranks over ${transport} train like one process`, async () => {
      const reference = await trainSingle(RUN);
      // The test's model is tiny: on tcp every message goes by the ring (messages up to
      // `smallMessageBytes`, 256 KiB by default, go by the direct exchange, which copies through
      // the work area whatever the memory).
      const ranks = await runRanks(
        transport,
        2,
        transport === 'tcp' ? { smallMessageBytes: 0 } : {},
      );
      expect(ranks.map((r) => r.rank)).toEqual([0, 1]);
      reference.losses.forEach((loss, s) => {
        const mean = (ranks[0]!.losses[s]! + ranks[1]!.losses[s]!) / 2;
        expect(Math.abs(mean - loss)).toBeLessThanOrEqual(1e-5 * Math.max(1, loss));
      });
      for (const r of ranks) {
        // [Note: flat buffers in registered memory]: on tcp every collective of a step runs on
        // registered memory; ws has none, so its reduce-scatters copy through the work area.
        if (transport === 'tcp') expect(r.stagedOps).toEqual([0, 0, 0]);
        else for (const staged of r.stagedOps) expect(staged).toBeGreaterThan(0);
        for (const [name, values] of reference.params) {
          const got = r.params[name]!;
          values.forEach((v, i) => {
            expect(Math.abs(got[i]! - v), name).toBeLessThanOrEqual(
              1e-5 * Math.max(1, Math.abs(v)),
            );
          });
        }
      }
    });
  }
});
