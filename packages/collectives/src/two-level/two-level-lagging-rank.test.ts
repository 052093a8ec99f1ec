import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runNodes } from '../test-support/two-level/run-nodes.js';

const here = dirname(fileURLToPath(import.meta.url));
const script = join(here, '..', 'test-support', 'two-level', 'lagging-rank.ts');
const LAG = /^\[rank (\d+)\] @@lag (.*)$/;

// [Note: an abort does not undo a finished op], on the path where the two-level suite's failure
// scenarios lost a rank's report: a rank still waking from the last shm barrier of an op that every
// rank completed, when another node's abort arrives.
describe('two levels: a rank behind the others when one aborts', () => {
  it('completes the op it is finishing, then fails the next with the abort', async () => {
    const { results, out, err } = await runNodes(2, 2, script, {});
    const reports = new Map<number, Record<string, unknown>>();
    for (const line of out.split('\n')) {
      const match = LAG.exec(line);
      if (match !== null) reports.set(Number(match[1]), JSON.parse(match[2]!));
    }
    expect([...reports.keys()].sort(), `${out}\n${err}`).toEqual([0, 1, 2, 3]);
    expect(results.map((r) => r.exitCode)).toEqual([0, 0]);
    const sum = Array.from({ length: 8 }, (_, i) => 4 * i + 6);
    for (const [rank, report] of [...reports].sort(([a], [b]) => a - b)) {
      expect({ rank, first: report.first }, JSON.stringify(report)).toEqual({ rank, first: sum });
      const error = report.secondError as { name: string; message: string };
      expect(error.name).toBe('GroupAbortedError');
      // Called before the abort came (pending) or after it (refused at once).
      const why = 'rank 3 gives up after op #1';
      expect([
        `[barrier] rank ${rank} (seq 2): group aborted: ${why}${rank === 3 ? '' : ' (reported by rank 3)'}`,
        `[barrier] rank ${rank} (seq 2): the group was aborted earlier by rank 3 (user): ${why}`,
      ]).toContain(error.message);
    }
    // Rank 1 really was behind: it held op #1's last barrier (so did no other rank).
    expect([0, 1, 2, 3].map((rank) => reports.get(rank)!.held)).toEqual([
      false,
      true,
      false,
      false,
    ]);
  }, 60_000);
});
