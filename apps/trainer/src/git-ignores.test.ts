import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..', '..');

/** Whether git ignores `path` in the repository (exit 0 of `git check-ignore`). */
function ignored(path: string): boolean {
  try {
    execFileSync('git', ['-C', ROOT, 'check-ignore', '-q', '--no-index', path]);
    return true;
  } catch {
    return false;
  }
}

describe('the outputs the READMEs write into the repository', () => {
  it('are git-ignored: ckpt/ (the checkpoint example), fsdp.jsonl, apps/trainer/out/', () => {
    for (const path of ['ckpt/latest', 'ckpt/step-000050/run.json', 'apps/trainer/ckpt/latest']) {
      expect(ignored(path), path).toBe(true);
    }
    expect(ignored('fsdp.jsonl')).toBe(true);
    expect(ignored('apps/trainer/out/model.safetensors')).toBe(true);
    expect(ignored('apps/trainer/src/train.ts')).toBe(false);
  });
});
