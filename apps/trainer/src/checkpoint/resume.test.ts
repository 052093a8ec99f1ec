import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMain } from '../test-support/cli.js';
import {
  type CliFixture,
  FIXTURES,
  maxRelativeGap,
  readCliFixture,
} from '../test-support/fixtures.js';

let fixture: CliFixture;
let out: string;
beforeAll(async () => {
  fixture = await readCliFixture();
  out = await mkdtemp(join(tmpdir(), 'webshard-resume-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

async function run(extra: readonly string[]) {
  return runMain([...fixture.flags, '--backend', 'cpu', ...extra], FIXTURES);
}

describe('a run resumed from its checkpoint continues with PyTorch’s losses', () => {
  for (const [name, first, second] of [
    [
      'fsdp on 2 ranks, resumed on 4 (sharded checkpoint, another world size)',
      ['--strategy', 'fsdp', '--world-size', '2', '--transport', 'local'],
      ['--strategy', 'fsdp', '--world-size', '4', '--transport', 'local'],
    ],
    [
      'ddp on 2 ranks, resumed single-process',
      ['--strategy', 'ddp', '--world-size', '2', '--transport', 'local'],
      [],
    ],
    ['single in fp16, resumed single', ['--precision', 'fp16'], ['--precision', 'fp16']],
  ] as const) {
    it(name, async () => {
      const dir = join(out, name.replace(/\W+/g, '-'));
      const whole = await run([...first, '--checkpoint-every', '10', '--checkpoint-dir', dir]);
      expect(whole.stderr).toBe('');
      expect(whole.exitCode).toBe(0);
      expect((await readFile(join(dir, 'latest'), 'utf8')).trim()).toBe('step-000020');
      const resumed = await run([...second, '--resume', join(dir, 'step-000010')]);
      expect(resumed.stderr).toBe('');
      expect(resumed.exitCode).toBe(0);
      expect(resumed.stdout).toContain('(step 10)');
      const records = resumed.summary!.records;
      expect(records.map((r) => r.step)).toEqual([11, 12, 13, 14, 15, 16, 17, 18, 19, 20]);
      const after = whole.summary!.records.slice(10).map((r) => r.loss);
      const losses = records.map((r) => r.loss);
      if ((first as readonly string[]).includes('fp16')) {
        // f16 compute: the same run as the one never stopped, not PyTorch's f32 numbers.
        expect(maxRelativeGap(losses, after)).toBeLessThan(1e-6);
      } else {
        expect(maxRelativeGap(losses, fixture.losses.slice(10))).toBeLessThan(1e-5);
      }
    });
  }
});

describe('checkpoint flags refused before training', () => {
  it.each([
    [['--checkpoint-every', '5'], '--checkpoint-every and --checkpoint-dir go together'],
    [['--resume', 'no-such-dir'], '--resume DIR/no-such-dir: no checkpoint there'],
  ])('%s', async (flags, message) => {
    const r = await run(flags);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain(message.replace('DIR', FIXTURES));
  });

  it('a sharded checkpoint resumed by ddp, or one already at --steps', async () => {
    const dir = join(out, 'refused');
    const ranks = ['--world-size', '2', '--transport', 'local'];
    const ok = await run([
      '--strategy',
      'fsdp',
      ...ranks,
      '--steps',
      '2',
      '--checkpoint-every',
      '2',
      '--checkpoint-dir',
      dir,
    ]);
    expect(ok.exitCode).toBe(0);
    const ddp = await run(['--strategy', 'ddp', ...ranks, '--resume', dir]);
    expect(ddp.exitCode).toBe(2);
    expect(ddp.stderr).toContain(
      `--resume ${join(dir, 'step-000002')}: a checkpoint of --strategy fsdp, which --strategy ddp cannot load`,
    );
    const done = await run(['--strategy', 'fsdp', ...ranks, '--steps', '2', '--resume', dir]);
    expect(done.exitCode).toBe(2);
    expect(done.stderr).toContain(
      'the checkpoint is at step 2, and --steps is 2: it has trained all its steps; raise --steps above 2 to train further',
    );
  });
});
