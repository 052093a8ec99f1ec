import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { appendLog, openLog } from './resumable-log.js';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-log-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const line = (step: number) => `${JSON.stringify({ step })}\n`;
const steps = async (path: string) =>
  (await readFile(path, 'utf8'))
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => (JSON.parse(l) as { step: number }).step);

it('a fenced rank 0 stops writing once a new rank 0 appended: the steps stay in order', async () => {
  const path = join(dir, 'elastic.jsonl');
  const old = await openLog(path, null, [], { fenced: true });
  await old.write(line(1));
  await old.write(line(2));
  // Frozen here; the others drop it and their new rank 0 goes on from step 2.
  const next = await appendLog(path);
  expect(next.lastStep).toBe(2);
  for (const step of [3, 4, 5]) await next.write(line(step));
  // Woken, the old rank 0 still believes it leads and writes its own step 3.
  expect(old.superseded).toBe(false);
  await old.write(line(3));
  expect(old.superseded).toBe(true);
  await old.write(line(4));
  await next.write(line(6));
  expect(next.superseded).toBe(false);
  expect(await steps(path)).toEqual([1, 2, 3, 4, 5, 6]);
  await Promise.all([old.close(), next.close()]);
});

it('unfenced (a run without --elastic) every line is written', async () => {
  const path = join(dir, 'plain.jsonl');
  const log = await openLog(path);
  await log.write(line(1));
  const other = await appendLog(path);
  await other.write(line(2));
  await log.write(line(3));
  expect([log.superseded, await steps(path)]).toEqual([false, [1, 2, 3]]);
  await Promise.all([log.close(), other.close()]);
});
