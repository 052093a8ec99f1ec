// What a user gets from npm (#22), checked on the packed tarballs (run after `pnpm build`;
// `pnpm check:packed`, in CI after the build):
// - `pnpm pack` of every published package; its package.json carries no `@webshard/source`
//   condition and nothing that points into src/ (publishConfig.exports / imports replace them,
//   publish-config.mjs keeps those in step), and the tarball holds LICENSE and README.md;
// - the README links nothing relative (an npm page cannot follow `../shared/...`);
// - a consumer project with `skipLibCheck: false` typechecks against the packed declarations of
//   every entry, twice: as a Node project (`module: node16`, `@types/node`) and as a browser
//   bundle (`moduleResolution: bundler`, DOM only, no `@types/node`) importing the entries a page
//   uses.
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { publishedPackages, syncPublishConfig } from './publish-config.mjs';

const root = resolve(new URL('../..', import.meta.url).pathname);
const problems = [];
const work = mkdtempSync(join(tmpdir(), 'webshard-packed-'));
const consumer = join(work, 'consumer');
const modules = join(consumer, 'node_modules');
mkdirSync(modules, { recursive: true });

for (const dir of syncPublishConfig(false))
  problems.push(`${dir}: publishConfig is out of date (node tooling/package/publish-config.mjs)`);

/** Links `name` into the consumer's node_modules from where `fromDir` resolves it. */
function linkDependency(name, fromDir) {
  const target = join(modules, name);
  if (existsSync(target)) return;
  const source = join(fromDir, 'node_modules', name);
  if (!existsSync(source)) return; // an optional dependency not installed here
  mkdirSync(dirname(target), { recursive: true });
  symlinkSync(realpathSync(source), target);
}

const packed = [];
for (const dir of publishedPackages()) {
  const out = join(work, 'tarballs', basename(dir));
  mkdirSync(out, { recursive: true });
  execFileSync('pnpm', ['pack', '--pack-destination', out], { cwd: dir, stdio: 'pipe' });
  const tarball = join(
    out,
    readdirSync(out).find((f) => f.endsWith('.tgz')),
  );
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const target = join(modules, pkg.name);
  mkdirSync(target, { recursive: true });
  execFileSync('tar', ['xzf', tarball, '-C', target, '--strip-components=1']);
  const manifest = readFileSync(join(target, 'package.json'), 'utf8');
  const { exports, imports } = JSON.parse(manifest);
  const where = `${pkg.name} (packed)`;
  if (JSON.stringify({ exports, imports }).includes('@webshard/source'))
    problems.push(`${where}: package.json still has the @webshard/source condition`);
  if (JSON.stringify({ exports, imports }).includes('./src/'))
    problems.push(`${where}: package.json points into src/`);
  for (const file of ['LICENSE', 'README.md'])
    if (!existsSync(join(target, file))) problems.push(`${where}: no ${file} in the tarball`);
  const readme = readFileSync(join(target, 'README.md'), 'utf8');
  for (const [, link] of readme.matchAll(/\]\(([^)\s]+)[^)]*\)/g))
    if (!/^(https?:|mailto:|#)/.test(link))
      problems.push(`${where}: README links ${link}, which does not resolve on the npm page`);
  for (const name of Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies }))
    if (!name.startsWith('@webshard/')) linkDependency(name, dir);
  packed.push({ name: pkg.name, exports: Object.keys(JSON.parse(manifest).exports ?? {}) });
}
linkDependency('@types/node', root);
linkDependency('typescript', root);

/** `import * as m0 from '...'` for each entry, so every declaration file is checked. */
function importsOf(filter) {
  const lines = [];
  for (const { name, exports } of packed)
    for (const subpath of exports) {
      if (subpath === './package.json' || !filter(subpath)) continue;
      const spec = subpath === '.' ? name : `${name}/${subpath.slice(2)}`;
      lines.push(`import * as m${lines.length} from '${spec}';\nvoid m${lines.length};`);
    }
  return `${lines.join('\n')}\nexport {};\n`;
}

const projects = {
  node: {
    source: importsOf(() => true),
    compilerOptions: { module: 'node16', moduleResolution: 'node16', types: ['node'] },
  },
  // What a page imports: no `/node` entry, no @types/node.
  browser: {
    source: importsOf((subpath) => subpath !== './node'),
    compilerOptions: { module: 'esnext', moduleResolution: 'bundler', types: [] },
  },
};
for (const [name, project] of Object.entries(projects)) {
  const dir = join(consumer, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'index.ts'), project.source);
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'es2022',
        lib: ['es2023', 'dom'],
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        ...project.compilerOptions,
      },
      files: ['index.ts'],
    }),
  );
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
  try {
    execFileSync(process.execPath, [join(modules, 'typescript/bin/tsc'), '-p', dir], {
      stdio: 'pipe',
    });
  } catch (error) {
    problems.push(
      `the ${name} consumer (skipLibCheck: false) does not typecheck:\n${error.stdout}${error.stderr}`,
    );
  }
}

// A web app's bundler over the packed packages (#22): Vite, Rollup underneath, builds a page that
// imports every entry but the Node-only ones (`./node`; `./testing`, test helpers over vitest;
// fsdp's `./checkpoint`, which writes files), resolving with the `browser` condition as any web
// app does.
// A Node built-in that some module reaches is recorded (and left external so one run lists them
// all) and fails the check.
const viteImports = [];
const app = join(consumer, 'vite-app');
mkdirSync(app, { recursive: true });
writeFileSync(
  join(app, 'main.js'),
  importsOf((subpath) => !['./node', './testing', './checkpoint'].includes(subpath)),
);
const builtins = new Set(builtinModules);
try {
  const { build } = await import('vite');
  await build({
    root: app,
    configFile: false,
    logLevel: 'silent',
    build: { write: false, minify: false, rollupOptions: { input: join(app, 'main.js') } },
    plugins: [
      {
        name: 'record-node-builtins',
        enforce: 'pre',
        resolveId(source, importer) {
          const bare = source.replace(/^node:/, '').split('/')[0] ?? '';
          if (!source.startsWith('node:') && !builtins.has(bare)) return null;
          viteImports.push(`${importer ? relative(modules, importer) : '?'}: ${source}`);
          return { id: source, external: true };
        },
      },
    ],
  });
} catch (error) {
  problems.push(`Vite could not build a page importing the packages: ${error.message}`);
}
if (viteImports.length > 0)
  problems.push(`Vite's browser build reached Node built-ins:\n  ${viteImports.join('\n  ')}`);

if (problems.length > 0) {
  console.error(`packed packages: ${problems.length} problem(s)\n${problems.join('\n')}`);
  console.error(`(the consumer project is kept in ${work})`);
  process.exit(1);
}
rmSync(work, { recursive: true, force: true });
console.log(
  `packed packages: ${packed.length} tarballs clean, a Node and a browser consumer typecheck with skipLibCheck: false, Vite builds a page of every browser entry with no Node built-in`,
);
