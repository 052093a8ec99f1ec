import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMain, TINY } from '../test-support/cli.js';

// [Note: sampling through micro-batches]: the final sample runs one sequence, which
// --num-microbatches above 1 used to refuse (MicrobatchError, exit 1, after training).
describe('offload samples with micro-batches', () => {
  let dir = '';
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'offload-sample-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  const flags = [...TINY, '--strategy', 'offload', '--num-slices', '2', '--sample-length', '40'];
  const sampleOf = (stdout: string) => stdout.slice(stdout.indexOf('sample:\n'));

  it('prints the sample that one micro-batch gives', async () => {
    const one = await runMain([...flags, '--num-microbatches', '1'], dir);
    const four = await runMain([...flags, '--num-microbatches', '4'], dir);
    expect(four.stderr).toBe('');
    expect(four.exitCode).toBe(0);
    expect(one.exitCode).toBe(0);
    expect(sampleOf(four.stdout)).toMatch(/^sample:\n.{10}/s);
    expect(sampleOf(four.stdout)).toBe(sampleOf(one.stdout));
  }, 60_000);
});
