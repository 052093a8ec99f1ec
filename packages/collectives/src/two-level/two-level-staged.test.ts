import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runNodes } from '../test-support/two-level/run-nodes.js';

// [Note: two-level node phases on staged memory]: the node's phases read every node-mate's
// operand in place in the node's arena (a staging copy, or a registered buffer). Checked against
// the slot schedule they replace (WEBSHARD_TWO_LEVEL_ROUNDS=1), on values whose sums depend on
// the order of the additions: the same bits, on ordinary arrays and registered buffers alike.
const script = join(import.meta.dirname, '..', 'test-support', 'two-level', 'staged-rank.ts');
const LINE = /^\[rank (\d+)\] @@staged (.*)$/;

interface StagedReport {
  rank: number;
  registered: boolean;
  digests: Record<string, number>;
  failures: string[];
}

async function reports(nodes: number, perNode: number, rounds: boolean): Promise<StagedReport[]> {
  const env: Record<string, string> = rounds ? { WEBSHARD_TWO_LEVEL_ROUNDS: '1' } : {};
  const { results, out, err } = await runNodes(nodes, perNode, script, env);
  expect(
    results.map((r) => r.exitCode),
    err,
  ).toEqual(Array(nodes).fill(0));
  const found: StagedReport[] = [];
  for (const line of out.split('\n')) {
    const match = LINE.exec(line);
    if (match !== null) found[Number(match[1])] = JSON.parse(match[2]!) as StagedReport;
  }
  expect(found.filter(Boolean)).toHaveLength(nodes * perNode);
  return found;
}

describe('two-level collectives on staged memory', () => {
  // 2 x 3: three node-mates, whose order of addition shows in the bits (two commute); 3 x 2:
  // three nodes around the ring between them. Both leave uneven shards.
  for (const [nodes, perNode] of [
    [2, 3],
    [3, 2],
  ] as const) {
    it(`${nodes} nodes x ${perNode}: the same bits as the slot schedule, registered buffers in the node's arena`, async () => {
      const [staged, rounds] = await Promise.all([
        reports(nodes, perNode, false),
        reports(nodes, perNode, true),
      ]);
      for (const report of staged) {
        expect(report.failures).toEqual([]);
        expect(report.registered).toBe(true);
        // Every rank gets the result its shard of the world says (all-reduce: all the same bits).
        expect(report.digests).toEqual(rounds[report.rank]!.digests);
        expect(Object.keys(report.digests).length).toBeGreaterThan(100);
      }
      const allReduces = (r: StagedReport) =>
        Object.entries(r.digests).filter(([name]) => name.startsWith('allReduce'));
      for (const report of staged) expect(allReduces(report)).toEqual(allReduces(staged[0]!));
    }, 240_000);
  }
});
