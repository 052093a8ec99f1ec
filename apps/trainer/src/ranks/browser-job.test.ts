import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { playgroundDir } from '../playground-page.js';
import { servePage } from './browser-job.js';
import type { BrowserJob } from './browser-rank.js';

const job = { config: {}, join: 'ws://127.0.0.1:1/join' } as unknown as BrowserJob;

/** GET `path` raw (no URL normalization by the client), as status, type and body. */
function get(port: number, path: string): Promise<{ status: number; type: string; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'GET' }, (res) => {
      let body = '';
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () =>
        resolve({ status: res.statusCode!, type: res.headers['content-type'] ?? '', body }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

describe('the page server of a --browser-ranks run', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'playground-build-'));
    await mkdir(join(dir, 'assets'));
    await writeFile(join(dir, 'index.html'), '<title>webshard playground</title>');
    await writeFile(join(dir, 'assets', 'index-1.js'), 'console.log(1)');
    await writeFile(join(dir, 'sonnets.txt'), 'text');
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it("serves the playground's build as the join page, with the job beside it, isolated", async () => {
    const page = await servePage(job, null, { host: '127.0.0.1', port: 0 }, dir);
    try {
      const index = await get(page.port, '/');
      expect(index).toMatchObject({ status: 200, body: '<title>webshard playground</title>' });
      const script = await get(page.port, '/assets/index-1.js');
      expect(script).toMatchObject({
        status: 200,
        type: 'text/javascript',
        body: 'console.log(1)',
      });
      expect(JSON.parse((await get(page.port, '/job.json')).body)).toEqual(job);
      // Nothing outside the build, no unknown types, no missing files: 404.
      expect((await get(page.port, '/../../../etc/passwd')).status).toBe(404);
      expect((await get(page.port, '/assets/%2e%2e/%2e%2e/%2e%2e/etc/hosts')).status).toBe(404);
      expect((await get(page.port, '/sonnets.txt')).status).toBe(404);
      expect((await get(page.port, '/assets/missing.js')).status).toBe(404);
      expect((await get(page.port, '/data')).status).toBe(404);
    } finally {
      await page.close();
    }
  });

  it('serves its minimal page where the playground is not built', async () => {
    const page = await servePage(job, null, { host: '127.0.0.1', port: 0 }, null);
    try {
      const index = await get(page.port, '/');
      expect(index.body).toContain('<script type="module" src="/rank.js"></script>');
      expect((await get(page.port, '/assets/index-1.js')).status).toBe(404);
    } finally {
      await page.close();
    }
  });

  it('finds the build through WEBSHARD_PLAYGROUND_DIR (off: none; a folder without index.html: none)', () => {
    expect(playgroundDir({ WEBSHARD_PLAYGROUND_DIR: dir })).toBe(dir);
    expect(playgroundDir({ WEBSHARD_PLAYGROUND_DIR: 'off' })).toBeNull();
    expect(playgroundDir({ WEBSHARD_PLAYGROUND_DIR: join(dir, 'assets') })).toBeNull();
  });
});
