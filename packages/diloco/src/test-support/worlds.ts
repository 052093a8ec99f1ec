// Worlds of several ranks in one process for the tests: `local` (in-memory), `tcp` and `ws`
// (loopback sockets through the rendezvous store of rank 0, as separate processes would use).
import { createServer } from 'node:net';
import {
  createLocalGroups,
  initProcessGroup,
  type ProcessGroup,
  type ProgressMode,
} from '@webshard/collectives';
import { createCpuBackend, RandomGenerator, rand } from '@webshard/tensor-core';

/** A transport the tests run in one thread (shm ranks are threads: see launch.ts). */
export type TestTransport = 'local' | 'tcp' | 'ws';

/** A port nothing listens on now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** `size` groups of one world over `transport`. */
export async function createWorld(transport: TestTransport, size: number): Promise<ProcessGroup[]> {
  if (transport === 'local') return createLocalGroups(size);
  const port = await freePort();
  return Promise.all(
    Array.from({ length: size }, (_, rank) =>
      initProcessGroup({
        backend: transport,
        rank,
        worldSize: size,
        masterAddr: '127.0.0.1',
        masterPort: port,
        timeoutMs: 20_000,
      }),
    ),
  );
}

/**
 * `size` tcp ranks of one world with every link shaped by `link` (a preset's name, [Note: the
 * link shaper] in @webshard/collectives), their communication on the ranks' thread or on workers.
 */
export async function createShapedWorld(
  size: number,
  link: string,
  progress: ProgressMode = 'thread',
): Promise<ProcessGroup[]> {
  const port = await freePort();
  return Promise.all(
    Array.from({ length: size }, (_, rank) =>
      initProcessGroup({
        backend: 'tcp',
        progress,
        link,
        rank,
        worldSize: size,
        masterAddr: '127.0.0.1',
        masterPort: port,
        timeoutMs: 30_000,
      }),
    ),
  );
}

/** Close every group of a world. */
export async function closeWorld(groups: readonly ProcessGroup[]): Promise<void> {
  await Promise.all(groups.map((g) => g.close()));
}

/** A seed for a randomized test: new each run, printed so a failure can be repeated. */
export function newSeed(name: string): number {
  const seed = (Math.random() * 2 ** 31) >>> 0 || 1;
  console.log(`${name}: seed ${seed}`);
  return seed;
}

/** Uniform numbers in [-scale, scale) from tensor-core's seeded generator. */
export async function randomValues(seed: number, count: number, scale = 1): Promise<Float32Array> {
  const backend = createCpuBackend();
  const t = rand([count], {
    backend,
    generator: new RandomGenerator(seed),
    low: -scale,
    high: scale,
  });
  const values = (await t.read()) as Float32Array;
  t.free();
  return values;
}
