import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { freePort } from '../launcher/launcher.js';
import { ElasticCoordinator } from './coordinator.js';
import { joinElastic } from './elastic-group.js';

// A coordinator started with a state file (as after a restart) serves every connection it
// accepts: nothing waits between its listening and its serving. Its state file loaded after it
// listened once, and a member that reconnected in that gap (under load: a fresh-clone CI's
// liveness test) got a socket nobody answered; dropped at the member timeout, it came back as a
// newcomer, a change of world the restart should not have made. The load is held 1 s here.
const slow = vi.hoisted(() => ({ ms: 0 }));
vi.mock('./coordinator-state-file.js', async (original) => {
  const real = await original<typeof import('./coordinator-state-file.js')>();
  return {
    ...real,
    loadCoordinatorState: async (path: string) => {
      await new Promise((resolve) => setTimeout(resolve, slow.ms));
      return real.loadCoordinatorState(path);
    },
  };
});

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-coordinator-start-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('a member that connects while the coordinator reads its state file is served at once', async () => {
  const port = await freePort();
  slow.ms = 1000;
  const started = performance.now();
  const starting = ElasticCoordinator.start({
    port,
    host: '127.0.0.1',
    minWorldSize: 1,
    maxWorldSize: 1,
    statePath: join(dir, 'world.json'),
  });
  const joining = joinElastic({
    url: `ws://127.0.0.1:${port}`,
    backend: 'ws',
    connectTimeoutMs: 20_000,
  });
  const coordinator = await starting;
  try {
    const elastic = await joining;
    expect(elastic.membership).toMatchObject({ rank: 0, worldSize: 1, epoch: 0 });
    // Refused until the coordinator listens (after its state, 1 s), then served: not a socket
    // left unanswered until some timeout.
    expect(performance.now() - started).toBeLessThan(5_000);
    await elastic.close();
  } finally {
    await coordinator.close();
  }
}, 60_000);
