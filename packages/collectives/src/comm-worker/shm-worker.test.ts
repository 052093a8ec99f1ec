import { dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { launch } from '../launcher/launcher.js';
import { ProcessGroup } from '../process-group.js';
import { busyFor } from '../test-support/comm-worker-world.js';
import { runInThreads } from '../test-support/shm/shm-suite-run.js';
import type { WorkerProgressReport } from '../test-support/shm/worker-progress-rank.js';
import { createShmHandle } from '../transports/shm/shm-layout.js';
import { WorkerGroup } from './worker-group.js';

// [Note: the communication worker handshake], over shm: the rank's rings attached by its worker,
// which moves and reduces while the rank's thread runs a kernel that never yields.

const here = dirname(fileURLToPath(import.meta.url));

describe('shm with its progress on the communication worker', () => {
  it('an all-reduce, a reduce-scatter and a gather issued before a 1.5 s kernel complete while it runs; the values are right', async () => {
    const handle = createShmHandle(2);
    const ranks = await Promise.all(
      [0, 1].map((rank) =>
        WorkerGroup.start({ shm: { handle, rank }, group: { timeoutMs: 20_000 } }),
      ),
    );
    try {
      const count = 1 << 20;
      for (const group of ranks) {
        expect(group).toBeInstanceOf(ProcessGroup);
        expect(group.transport.kind).toBe('shm');
      }
      // Warm the rings and the reductions, so what is measured below is the op, not the start.
      await Promise.all(ranks.map((g) => g.allReduce(new Float32Array(count)).wait()));
      const data = ranks.map((g) => new Float32Array(count).fill(g.rank + 1));
      const scattered = ranks.map(() => new Float32Array(count / 2));
      const gathered = ranks.map(() => new Float32Array(6));
      const issuedAt = performance.timeOrigin + performance.now();
      const works = ranks.flatMap((g, r) => [
        g.allReduce(data[r]!),
        g.reduceScatter(new Float32Array(count).fill(10 * (r + 1)), scattered[r]!),
        g.allGather(Float32Array.of(r, r, r), gathered[r]!),
      ]);
      const kernelEnd = busyFor(1500);
      await Promise.all(works.map((w) => w.wait()));
      for (const work of works) {
        const at = WorkerGroup.completedAt(work);
        expect(at).toBeGreaterThan(issuedAt);
        expect(at).toBeLessThan(kernelEnd);
      }
      for (const r of [0, 1]) {
        expect([data[r]![0], data[r]![count - 1]]).toEqual([3, 3]);
        expect([scattered[r]![0], scattered[r]![count / 2 - 1]]).toEqual([30, 30]);
        expect(Array.from(gathered[r]!)).toEqual([0, 0, 0, 1, 1, 1]);
      }
    } finally {
      await Promise.all(ranks.map((g) => g.close()));
    }
  }, 60_000);

  it("webshard-run's thread ranks with progress 'worker': the same script, its op done inside a held kernel, all exit 0", async () => {
    const out = new PassThrough();
    let text = '';
    out.on('data', (chunk: Buffer) => {
      text += chunk.toString();
    });
    const result = await launch({
      nprocPerNode: 2,
      ranksAs: 'threads',
      script: join(here, '..', 'launcher', '__fixtures__', 'worker-progress.ts'),
      stdout: out,
      stderr: new PassThrough(),
      forwardSignals: false,
      execArgv: ['--conditions=@webshard/source'],
    });
    expect(result).toEqual({ exitCode: 0, rankExitCodes: [0, 0] });
    expect(text.trim().split('\n').sort()).toEqual(
      [0, 1].map(
        (r) =>
          `[rank ${r}] rank ${r} of 2 over shm (WorkerGroup): sum 3 3, done inside the kernel true`,
      ),
    );
  }, 60_000);

  it("launchThreads({ progress: 'worker' }): each thread rank's group is a WorkerGroup whose op completes inside a held kernel; without it, after", async () => {
    const run = (progress: 'thread' | 'worker') =>
      runInThreads<null, WorkerProgressReport>(2, 'worker-progress-rank.ts', null, {
        progress,
        group: { timeoutMs: 20_000 },
      });
    const expected = (worker: boolean) =>
      [0, 1].map(() => ({ kind: 'shm', worker, sum: 3, insideKernel: worker }));
    expect(await run('worker')).toEqual(expected(true));
    // On the rank's thread the op waits for the kernel: the worker's timestamp is not there.
    expect(await run('thread')).toEqual(expected(false));
  }, 60_000);
});
