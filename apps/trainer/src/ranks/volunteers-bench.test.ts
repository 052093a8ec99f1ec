import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BenchRow } from '@webshard/bench';
import { skipWithoutChromium } from '@webshard/test-config/browser-page';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * `bench:volunteers` at CI size (`WEBSHARD_VOLUNTEERS_MODEL=tiny`, bench/volunteers.ts): 2 Node
 * members and a headless Chromium tab in an elastic DiLoCo world over broadband-20, a new tab
 * admitted mid-run while the first one closes. The script must finish and write its rows with
 * every number measured: the tab trained, the newcomer was admitted over the shaped link, the
 * syncs sent bytes, the loss fell. And the DDP reference alone (`_LINKS=` empty): 3 Node ranks on
 * loopback, its row, its log kept and drawn.
 */
const SCRIPT = join(import.meta.dirname, '..', '..', 'bench', 'volunteers.ts');
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-volunteers-test-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe.skipIf(skipWithoutChromium('volunteers-bench.test.ts'))('bench:volunteers', () => {
  it('tiny, over broadband-20: finishes and writes every row with a measured value', async () => {
    const out = join(dir, 'rows.json');
    const { code, said } = await runBench({
      WEBSHARD_VOLUNTEERS_LINKS: 'broadband-20',
      WEBSHARD_VOLUNTEERS_DDP: '0',
      WEBSHARD_VOLUNTEERS_OUT: out,
      WEBSHARD_VOLUNTEERS_KEEP: join(dir, 'kept'),
    });
    expect(code, said).toBe(0);
    const rows = JSON.parse(await readFile(out, 'utf8')) as BenchRow[];
    const value = (suffix: string) => {
      const row = rows.find((r) => r.name.endsWith(suffix));
      expect(
        row,
        `a row ending "${suffix}" in ${rows.map((r) => r.name).join('; ')}`,
      ).toBeDefined();
      return row!.value as number;
    };
    for (const who of ['job', 'node (lead)', 'tab']) {
      expect(value(`broadband-20: ${who}`)).toBeGreaterThan(0);
    }
    const admit = rows.find((r) => r.metric === 'admit')!;
    expect(admit.value).toBeGreaterThan(0);
    expect(admit.value).toBeLessThan(120);
    expect(value('bytes the lead sends per token')).toBeGreaterThan(0);
    // The tiny GPT's first steps are at 4.5 on the corpus's characters; 120 steps ended at
    // 3.8-4.1 (the tokens the world trains depend on when the newcomer lands: a member still
    // downloading trains nothing of its share).
    const loss = rows.find((r) => r.metric === 'loss')!;
    expect(loss.value).toBeLessThan(4.3);
    expect(value('tab peak memory (renderer VmHWM, 16256 parameters)')).toBeGreaterThan(0);
    // `_KEEP`: the world's log, and one page of its loss curve with the log's steps in it.
    expect((await readdir(join(dir, 'kept'))).sort()).toEqual([
      'volunteers-broadband-20.jsonl',
      'volunteers.html',
    ]);
    const page = await readFile(join(dir, 'kept', 'volunteers.html'), 'utf8');
    expect(page).toContain('volunteers-broadband-20.jsonl');
  }, 600_000);

  it('tiny, no links: the DDP reference alone, its row, its log and its curve', async () => {
    const out = join(dir, 'ddp-rows.json');
    const kept = join(dir, 'ddp-kept');
    const { code, said } = await runBench({
      WEBSHARD_VOLUNTEERS_LINKS: '',
      WEBSHARD_VOLUNTEERS_STEPS: '24',
      WEBSHARD_VOLUNTEERS_OUT: out,
      WEBSHARD_VOLUNTEERS_KEEP: kept,
    });
    expect(code, said).toBe(0);
    const rows = JSON.parse(await readFile(out, 'utf8')) as BenchRow[];
    expect(rows.map((r) => r.name)).toEqual(['GPT 1x32 (tiny) ddp, 3 Node ranks, loopback: job']);
    expect(rows[0]!.value).toBeGreaterThan(0);
    expect((await readdir(kept)).sort()).toEqual(['DDP-none.jsonl', 'volunteers.html']);
    const log = (await readFile(join(kept, 'DDP-none.jsonl'), 'utf8')).trim().split('\n');
    expect(log.length).toBeGreaterThanOrEqual(24);
    expect(await readFile(join(kept, 'volunteers.html'), 'utf8')).toContain('DDP-none.jsonl');
  }, 600_000);
});

/** Runs the bench script with `env` added; its exit code and the tail of what it said. */
async function runBench(
  env: Record<string, string>,
): Promise<{ code: number | null; said: string }> {
  const child = spawn(
    process.execPath,
    ['--conditions=@webshard/source', '--import', 'tsx', SCRIPT],
    {
      env: { ...process.env, WEBSHARD_VOLUNTEERS_MODEL: 'tiny', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let said = '';
  child.stdout.on('data', (chunk: Buffer) => (said = (said + chunk.toString()).slice(-20_000)));
  child.stderr.on('data', (chunk: Buffer) => (said = (said + chunk.toString()).slice(-20_000)));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, said };
}
