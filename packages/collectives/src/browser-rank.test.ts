import { describe, expect, it } from 'vitest';
import { connectBrowserRank, formatJoinUrl, parseJoinUrl } from './browser-rank.js';
import { freePort } from './launcher/launcher.js';
import { initProcessGroup } from './init-process-group.js';

// Pages in Node: `listen: false` makes them dial only, as a page does, so the two of them talk
// through rank 0's relay. browser-page.test.ts and apps/trainer's browser-ranks test run real pages.

describe('connectBrowserRank', () => {
  it('two pages claim ranks 1 and 2 of a job Node rank 0 hosts, and all-reduce through the relay', async () => {
    const port = await freePort();
    const token = 'browser-rank-test';
    const url = formatJoinUrl(`ws://127.0.0.1:${port}`, 3, [1, 2]);
    expect(url).toBe(`ws://127.0.0.1:${port}/?worldSize=3&ranks=1-2`);
    const node = initProcessGroup({
      backend: 'ws',
      rank: 0,
      worldSize: 3,
      masterPort: port,
      token,
    });
    const pages = await Promise.all([
      connectBrowserRank({ url, token, timeoutMs: 20_000 }),
      connectBrowserRank({ url, token, timeoutMs: 20_000 }),
    ]);
    const group = await node;
    try {
      expect(pages.map((p) => p.rank).sort()).toEqual([1, 2]);
      expect(pages.map((p) => p.worldSize)).toEqual([3, 3]);
      // A third page finds every browser rank taken, while the job runs.
      const late = connectBrowserRank({ url, token, timeoutMs: 5000 });
      await expect(late).rejects.toMatchObject({
        name: 'RendezvousError',
        code: 'E_RANKS_TAKEN',
        message: '[connectBrowserRank] every browser rank of this job (1 to 2 of 3) is taken',
      });
      const values = [group, ...pages.map((p) => p.group)].map(
        (g) => new Float32Array([g.rank + 1, 10 * (g.rank + 1)]),
      );
      await Promise.all(
        [group, ...pages.map((p) => p.group)].map((g, i) => g.allReduce(values[i]!).wait()),
      );
      for (const v of values) expect(Array.from(v)).toEqual([6, 60]);
    } finally {
      await Promise.all([...pages.map((p) => p.group.close()), group.close()]);
    }
  }, 60_000);

  it('a wrong token is refused with E_AUTH', async () => {
    const port = await freePort();
    const node = initProcessGroup({
      backend: 'ws',
      rank: 0,
      worldSize: 2,
      masterPort: port,
      token: 'right',
      timeoutMs: 10_000,
    });
    node.catch(() => {});
    const url = formatJoinUrl(`ws://127.0.0.1:${port}`, 2, [1]);
    await expect(
      connectBrowserRank({ url, token: 'wrong', timeoutMs: 10_000 }),
    ).rejects.toMatchObject({ name: 'RendezvousError', code: 'E_AUTH' });
    const page = await connectBrowserRank({ url, token: 'right', timeoutMs: 10_000 });
    const group = await node;
    await Promise.all([page.group.close(), group.close()]);
  }, 30_000);

  it('a join URL without the world size or ranks is an ArgumentError naming what is wrong', () => {
    expect(parseJoinUrl('ws://h:1/?worldSize=4&ranks=2-3')).toEqual({
      store: 'ws://h:1',
      worldSize: 4,
      ranks: [2, 3],
    });
    expect(() => parseJoinUrl('http://h:1/?worldSize=4&ranks=1-1')).toThrow(
      'join URL http://h:1/?worldSize=4&ranks=1-1: not ws:// or wss://',
    );
    expect(() => parseJoinUrl('ws://h:1/?ranks=1-1')).toThrow('worldSize must be >= 2');
    expect(() => parseJoinUrl('ws://h:1/?worldSize=2&ranks=0-1')).toThrow(
      'ranks must be A-B with 1 <= A <= B < worldSize',
    );
    expect(() => parseJoinUrl('ws://h:1/?worldSize=2&ranks=1-2')).toThrow(
      'ranks must be A-B with 1 <= A <= B < worldSize',
    );
    expect(() => formatJoinUrl('ws://h:1', 3, [])).toThrow(
      'browser ranks must be consecutive, at least one',
    );
  });
});
