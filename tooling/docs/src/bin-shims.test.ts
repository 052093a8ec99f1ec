// [Note: bin shims]: every bin of every workspace package is a committed file that runs before a
// build (the source, through tooling/bin/run-source.mjs) and after it (dist/), with the CLI's exit
// code either way.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { repoRoot } from './consumer-project.js';

const bins = ['packages', 'apps'].flatMap((dir) =>
  readdirSync(join(repoRoot, dir)).flatMap((name) => {
    const pkgDir = join(repoRoot, dir, name);
    if (!existsSync(join(pkgDir, 'package.json'))) return [];
    const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
    return Object.entries<string>(pkg.bin ?? {}).map(([bin, file]) => ({ pkg, pkgDir, bin, file }));
  }),
);
const tracked = new Set(
  execFileSync('git', ['ls-files'], { cwd: repoRoot, encoding: 'utf8' }).split('\n'),
);

/** Each CLI's source, and what `--help` (or no argument) prints and exits with. */
const CLIS: Record<string, { source: string; args: string[]; status: number; text: RegExp }> = {
  'webshard-run': {
    source: 'src/cli/webshard-run.ts',
    args: ['--help'],
    status: 0,
    text: /^usage: webshard-run --nproc-per-node N/,
  },
  'webshard-consolidate': {
    source: 'src/cli/webshard-consolidate.ts',
    args: [],
    status: 2,
    text: /usage: webshard-consolidate DIR OUT\.safetensors/,
  },
  'webshard-train': { source: 'src/cli.ts', args: ['--help'], status: 0, text: /--strategy/ },
  'webshard-report': {
    source: 'src/report-cli.ts',
    args: ['--help'],
    status: 0,
    text: /^webshard-report: one HTML page of the runs of JSONL logs/,
  },
};

describe('bins', () => {
  it('are the four CLIs', () => {
    expect(bins.map((b) => b.bin).sort()).toEqual(Object.keys(CLIS).sort());
  });

  for (const { pkg, pkgDir, bin, file } of bins)
    describe(`${pkg.name}'s ${bin}`, () => {
      const relative = join(pkgDir, file).slice(repoRoot.length + 1);
      const cli = CLIS[bin]!;

      it('is a committed node script under bin/, shipped in files', () => {
        expect(file).toMatch(/^\.\/bin\/[\w-]+\.js$/);
        expect(tracked.has(relative)).toBe(true);
        expect(readFileSync(join(pkgDir, file), 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(
          true,
        );
        expect(pkg.files).toContain('bin');
      });

      it('runs the built CLI when there is one, with its exit code', () => {
        const result = spawnSync(process.execPath, [join(pkgDir, file), ...cli.args], {
          encoding: 'utf8',
          timeout: 60_000,
        });
        expect(`${result.stdout}${result.stderr}`).toMatch(cli.text);
        expect(result.status).toBe(cli.status);
      }, 90_000);

      it('runs the source through tsx before a build, with its exit code', () => {
        // What the shim does without dist/: the runner on the CLI's source.
        const dir = mkdtempSync(join(tmpdir(), 'webshard-bin-'));
        const entry = join(dir, 'from-source.mjs');
        const runner = pathToFileURL(join(repoRoot, 'tooling/bin/run-source.mjs')).href;
        const source = pathToFileURL(join(pkgDir, cli.source)).href;
        writeFileSync(
          entry,
          `import { runSource } from '${runner}';\nawait runSource(new URL('${source}'));\n`,
        );
        const result = spawnSync(process.execPath, [entry, ...cli.args], {
          encoding: 'utf8',
          timeout: 60_000,
        });
        expect(`${result.stdout}${result.stderr}`).toMatch(cli.text);
        expect(result.status).toBe(cli.status);
      }, 90_000);
    });
});
