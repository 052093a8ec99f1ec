import { execFile, execFileSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createCpuBackend } from '../../runtime.js';
import type { MatmulThreads } from './matmul-threads.js';
import { CLOSED, closeCall, JOIN, joinCall, openDoor } from './matmul-worker.js';

// [Note: joining a call]: a worker joins a call only through its open door, and the calling
// thread waits only for the workers that joined, never for one the system has not run.

describe("a call's door", () => {
  it('lets workers in while open, counts them, and shuts them out once closed', () => {
    const ctl = new Int32Array(new SharedArrayBuffer(4 * (JOIN + 1)));
    ctl[JOIN] = CLOSED;
    // Nothing joins before the first call is published.
    expect(joinCall(ctl, JOIN, 0)).toBe(false);
    ctl[JOIN] = openDoor(7);
    expect(joinCall(ctl, JOIN, 7)).toBe(true);
    expect(joinCall(ctl, JOIN, 7)).toBe(true);
    expect(closeCall(ctl, JOIN)).toBe(2);
    expect(ctl[JOIN]).toBe(CLOSED);
    // Late: the door is shut, and closing again finds nobody.
    expect(joinCall(ctl, JOIN, 7)).toBe(false);
    expect(closeCall(ctl, JOIN)).toBe(0);
  });

  it("keeps a worker that woke for an earlier call out of a later call's count", () => {
    const ctl = new Int32Array(new SharedArrayBuffer(4 * (JOIN + 1)));
    ctl[JOIN] = openDoor(8);
    // A worker that read generation 7 and was descheduled until call 8 was out.
    expect(joinCall(ctl, JOIN, 7)).toBe(false);
    expect(closeCall(ctl, JOIN)).toBe(0);
    // Generations past the door's 22 bits, and negative ones (the counter wraps), still match.
    for (const generation of [2 ** 22 + 5, -3, 2 ** 31 - 1]) {
      ctl[JOIN] = openDoor(generation);
      expect(joinCall(ctl, JOIN, generation)).toBe(true);
      expect(joinCall(ctl, JOIN, generation - 1)).toBe(false);
      expect(closeCall(ctl, JOIN)).toBe(1);
    }
  });
});

/** Whether `taskset` can hold a process to one core here (util-linux, and a kernel that allows it). */
function canPin(): boolean {
  try {
    execFileSync('taskset', ['-c', '0', 'true'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
const pinning = canPin();
if (!pinning) console.warn('skipping the one-core case: `taskset -c 0 true` failed here');

describe('matmul threads where the workers cannot run', () => {
  // A process held to one core: the worker runs only when the calling thread stops. A calling
  // thread that waited (polling, then blocked) for every worker paid its polling time on each
  // call; waiting only for the joined ones, it pays nothing for a worker that never woke
  // ([Note: joining a call]). Checked: with every worker counted, 2-thread calls of 160^3 took
  // 3.9x the one-thread calls on the Zen 5 of issue 49 (0.55 against 0.14 ms). A worker that
  // polled 0.2 ms after each call held the core the calling thread needed for the next: 1.7-2.1x
  // on the Intel VM (a fresh-clone CI failed at 2.08 against a bound of 2), 1.1x where a pool of
  // more threads than cores does not poll ([Note: polling only with a core to spare]).
  // Skipped, with the warning above, only where a process cannot be held to one core: no
  // `taskset` (util-linux), or a sandbox that refuses sched_setaffinity. The CI machine (Debian,
  // util-linux installed) runs it: the fresh-clone runs of issue 49's session ran it, 0 skipped.
  it.skipIf(!pinning)(
    'runs split calls at the speed of one thread when both threads share one core',
    async () => {
      const source = `const { createCpuBackend } = await import(${JSON.stringify(
        fileURLToPath(new URL('../../runtime.ts', import.meta.url)),
      )});
      const n = 160;
      const make = (backend) => {
        const t = () => ({ storage: backend.allocate(n * n * 4), offset: 0, dtype: 'f32', shape: [1, n, n] });
        const [a, b, c] = [t(), t(), t()];
        backend.write(a, Float32Array.from({ length: n * n }, (_, i) => Math.sin(i)));
        backend.write(b, Float32Array.from({ length: n * n }, (_, i) => Math.cos(i)));
        return () => backend.matmul(a, b, c, false, false);
      };
      const two = createCpuBackend({ matmulThreads: 2, matmulFma: 'off' });
      const one = createCpuBackend({ matmulThreads: 1, matmulFma: 'off' });
      const threads = await two.startMatmulThreads();
      const polls = two.wasmMatmul.threads.polls;
      const calls = [make(two), make(one)];
      const times = [[], []];
      for (let round = 0; round < 600; round++) {
        for (const [i, call] of calls.entries()) {
          const t0 = performance.now();
          call();
          if (round >= 300) times[i].push(performance.now() - t0);
        }
      }
      const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
      console.log(JSON.stringify({ threads, polls, two: median(times[0]), one: median(times[1]) }));
      two.dispose();
      one.dispose();`;
      const out = await new Promise<string>((resolve, reject) => {
        execFile(
          'taskset',
          [
            '-c',
            '0',
            process.execPath,
            '--conditions=@webshard/source',
            '--import',
            'tsx',
            '--input-type=module',
            '-e',
            source,
          ],
          { timeout: 120_000 },
          (error, stdout) => (error ? reject(error) : resolve(stdout)),
        );
      });
      const { threads, polls, two, one } = JSON.parse(out.trim()) as {
        threads: number;
        polls: boolean;
        two: number;
        one: number;
      };
      console.log(
        `one core: 2-thread calls ${two.toFixed(3)} ms, one-thread ${one.toFixed(3)} ms (median of 300)`,
      );
      expect(threads).toBe(2);
      expect(polls).toBe(false);
      expect(two / one).toBeLessThan(1.5);
    },
    150_000,
  );
});

describe('polling', () => {
  // [Note: polling only with a core to spare]: a pool polls only where each of its threads may
  // have a core of its own. Two threads, with the process's share of the cores all of them
  // (LOCAL_WORLD_SIZE 1) and one (LOCAL_WORLD_SIZE = the cores: [Note: threads per process]), so
  // that it holds on a machine of any size.
  it('happens where each thread has a core, and not with more threads than cores', async () => {
    const cores = availableParallelism();
    const before = process.env.LOCAL_WORLD_SIZE;
    try {
      for (const [ranks, share] of [
        [1, cores],
        [cores, 1],
      ] as const) {
        process.env.LOCAL_WORLD_SIZE = String(ranks);
        const backend = createCpuBackend({ matmulThreads: 2 });
        const threads = await backend.startMatmulThreads();
        const pool = (backend as unknown as { wasmMatmul: { threads: MatmulThreads } }).wasmMatmul
          .threads;
        expect(threads).toBe(2);
        expect(pool.polls).toBe(2 <= share);
        backend.dispose();
      }
    } finally {
      if (before === undefined) delete process.env.LOCAL_WORLD_SIZE;
      else process.env.LOCAL_WORLD_SIZE = before;
    }
  });
});
