import { execFile } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The repository root. */
export const repoRoot = resolve(new URL('../../..', import.meta.url).pathname);

/** The published packages: every `packages/*` that is not private. */
export function publishedPackageDirs(): string[] {
  return readdirSync(join(repoRoot, 'packages'))
    .sort()
    .map((name) => join(repoRoot, 'packages', name))
    .filter((dir) => !JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).private);
}

/**
 * A fresh npm project as a user makes one (`npm init -y`, `"type": "module"`), with every
 * published package installed from the tarball `pnpm pack` makes of it, as the READMEs tell a user
 * to until the packages are on npm. The tarballs are packed once (after `pnpm build`: they hold
 * `dist/`) and unpacked into `node_modules`; their third-party dependencies and tsx are linked from
 * the workspace's install rather than fetched, so the test needs no network. `node_modules/.bin`
 * gets the packages' bins and tsx, as npm would make it.
 */
export async function makeConsumerProject(): Promise<string> {
  const work = mkdtempSync(join(tmpdir(), 'webshard-docs-'));
  const project = join(work, 'project');
  const modules = join(project, 'node_modules');
  const bin = join(modules, '.bin');
  mkdirSync(bin, { recursive: true });
  writeFileSync(
    join(project, 'package.json'),
    `${JSON.stringify({ name: 'my-webshard-project', version: '1.0.0', private: true, type: 'module' }, null, 2)}\n`,
  );
  const link = (name: string, fromDir: string) => {
    const target = join(modules, name);
    const source = join(fromDir, 'node_modules', name);
    if (existsSync(target) || !existsSync(source)) return;
    mkdirSync(dirname(target), { recursive: true });
    symlinkSync(realpathSync(source), target);
  };
  for (const dir of publishedPackageDirs()) {
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    if (!existsSync(join(dir, 'dist')))
      throw new Error(`${pkg.name} has no dist/: run \`pnpm build\` before the docs test`);
    const out = join(work, 'tarballs', pkg.name.replace('/', '-'));
    mkdirSync(out, { recursive: true });
    await run('pnpm', ['pack', '--pack-destination', out], { cwd: dir });
    const tarball = join(out, readdirSync(out).find((f) => f.endsWith('.tgz'))!);
    const target = join(modules, pkg.name);
    mkdirSync(target, { recursive: true });
    await run('tar', ['xzf', tarball, '-C', target, '--strip-components=1']);
    for (const name of Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies }))
      if (!name.startsWith('@webshard/')) link(name, dir);
    for (const [name, file] of Object.entries<string>(pkg.bin ?? {}))
      symlinkSync(join(target, file), join(bin, name));
  }
  link('tsx', repoRoot);
  symlinkSync(join(modules, 'tsx', 'dist', 'cli.mjs'), join(bin, 'tsx'));
  return project;
}
