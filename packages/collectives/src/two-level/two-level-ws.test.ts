import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runNodes } from '../test-support/two-level/run-nodes.js';

const allReduce = join(import.meta.dirname, '..', 'launcher', '__fixtures__', 'all-reduce.ts');

describe('two levels over ws between nodes', () => {
  it("runs an unchanged initProcessGroup({ backend: 'ws' }) script on 2 nodes x 2 threads", async () => {
    const { results, out, err } = await runNodes(2, 2, allReduce, {}, ['ws']);
    expect(
      results.map((r) => r.exitCode),
      err,
    ).toEqual([0, 0]);
    expect(out.trim().split('\n').sort()).toEqual(
      [0, 1, 2, 3].map((r) => `[rank ${r}] rank ${r} of 4 over shm+ws: sum 10, count 4`),
    );
  });
});
