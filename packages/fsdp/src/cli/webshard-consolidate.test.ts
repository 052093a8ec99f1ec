import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const cli = join(dirname(fileURLToPath(import.meta.url)), 'webshard-consolidate.ts');
const run = (args: string[]) =>
  spawnSync(process.execPath, ['--conditions=@webshard/source', '--import', 'tsx', cli, ...args], {
    encoding: 'utf8',
  });

describe('webshard-consolidate', () => {
  it('prints its usage with --help (exit 0) and without arguments (exit 2)', () => {
    const help = run(['--help']);
    expect(help.status).toBe(0);
    expect(help.stdout).toContain('usage: webshard-consolidate DIR OUT.safetensors');
    const none = run([]);
    expect(none.status).toBe(2);
    expect(none.stderr).toContain('usage:');
  });

  it('names the problem in one line and exits 2 on a directory that is not a checkpoint', () => {
    const dir = mkdtempSync(join(tmpdir(), 'consolidate-'));
    try {
      const result = run([dir, join(dir, 'out.safetensors')]);
      expect(result.status).toBe(2);
      expect(result.stderr.trim()).toBe(
        `webshard-consolidate: [consolidateCheckpoint] ${dir}: is not a checkpoint: no readable manifest.json`,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
