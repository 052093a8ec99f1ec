// The API reports of CI (#14): for every published package and every entry in its `exports`,
// api-extractor reads the built declarations (dist/<entry>.d.ts, so run `pnpm build` first) and
// writes `packages/<package>/api/<entry>.api.md`, the entry's public names and signatures.
// `node tooling/api-report/api-report.mjs` (`pnpm api:update`) rewrites the reports;
// with `--check` (`pnpm check:api`, run by CI after the build) it changes nothing and exits 1
// naming every report that differs from what the build exports, so a change to a public surface
// shows in review as a change to its report.
// Warnings in a report name where they are in the declarations (`dist/local-transport-<hash>.d.ts:17:5`):
// those positions are written as `dist/<file>.d.ts` without the chunk's hash or line, so a report
// changes when the surface does, not when tsup renames a chunk.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Extractor, ExtractorConfig } from '@microsoft/api-extractor';

const root = resolve(new URL('../..', import.meta.url).pathname);
const check = process.argv.includes('--check');
const scratch = mkdtempSync(join(tmpdir(), 'webshard-api-'));

/** `[entry name, declaration file]` for each subpath a package exports (the root is `index`). */
function entries(pkg) {
  const out = [];
  for (const [subpath, target] of Object.entries(pkg.exports ?? {})) {
    const types = target?.import?.types;
    if (typeof types !== 'string') continue;
    out.push([subpath === '.' ? 'index' : subpath.slice(2).replaceAll('/', '-'), types]);
  }
  return out;
}

/**
 * Names an entry's declarations export under a bundler's short alias (`export { loadSafetensors as
 * l }`): tsup's declaration bundler does this when one entry's module is also imported by another
 * entry, which makes the first entry export the second's names as `l`, `D`, `S`. Split the module
 * so each entry reaches its own (as tensor-core's io/safetensors-file.ts is split from
 * io/safetensors.ts). Only an entry's own export list counts: re-exports `from` a shared chunk
 * (`export { u as lt } from './tensor-<hash>.js'`) rename the chunk's aliases back to real names.
 */
function aliasedExports(file) {
  const text = readFileSync(file, 'utf8');
  const out = [];
  for (const statement of text.matchAll(/^export \{([^}]*)\};/gm)) {
    for (const match of statement[1].matchAll(/([\w$]+) as ([\w$]{1,2})\s*(?:,|$)/g)) {
      out.push(`${match[1]} as ${match[2]}`);
    }
  }
  return out;
}

/** A report's text without the hashes and positions of tsup's declaration chunks. */
function normalized(text) {
  return text.replace(/(dist\/[\w./-]*?)(?:-[\w-]{8})?\.d\.(c?)ts:\d+:\d+/g, '$1.d.$2ts');
}

const differs = [];
const aliased = [];
let reports = 0;
for (const name of readdirSync(join(root, 'packages')).sort()) {
  const dir = join(root, 'packages', name);
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  if (pkg.private) continue;
  if (!check) mkdirSync(join(dir, 'api'), { recursive: true });
  for (const [entry, types] of entries(pkg)) {
    if (check && !existsSync(join(dir, 'api', `${entry}.api.md`))) {
      differs.push(`packages/${name}/api/${entry}.api.md (missing)`);
      continue;
    }
    if (existsSync(join(dir, types))) {
      for (const alias of aliasedExports(join(dir, types)))
        aliased.push(`${name}/${types}: ${alias}`);
    }
    const config = ExtractorConfig.prepare({
      configObjectFullPath: join(dir, 'api-extractor.json'),
      packageJsonFullPath: join(dir, 'package.json'),
      configObject: {
        projectFolder: dir,
        mainEntryPointFilePath: join(dir, types),
        compiler: {
          overrideTsconfig: {
            compilerOptions: {
              target: 'ES2022',
              lib: ['ES2023', 'DOM'],
              module: 'ESNext',
              moduleResolution: 'Bundler',
              types: ['node'],
              strict: true,
              skipLibCheck: true,
            },
            files: [join(dir, types)],
          },
        },
        apiReport: {
          enabled: true,
          reportFileName: entry,
          reportFolder: join(dir, 'api'),
          reportTempFolder: join(scratch, name),
        },
        docModel: { enabled: false },
        dtsRollup: { enabled: false },
        tsdocMetadata: { enabled: false },
        messages: {
          compilerMessageReporting: { default: { logLevel: 'warning' } },
          extractorMessageReporting: {
            default: { logLevel: 'warning', addToApiReportFile: true },
            // The packages use no release tags (@public, @beta): every exported name is public.
            'ae-missing-release-tag': { logLevel: 'none', addToApiReportFile: false },
            // A type used in a signature but exported from another entry of the package (or not
            // at all) is noted in the report instead of failing the run.
            'ae-forgotten-export': { logLevel: 'none', addToApiReportFile: true },
            // Missing doc comments are listed by line of tsup's hashed declaration chunks
            // (dist/backend-<hash>.d.ts), which move with any change to the build: a report that
            // churns on every commit hides the changes it is there to show.
            'ae-undocumented': { logLevel: 'none', addToApiReportFile: false },
          },
          tsdocMessageReporting: { default: { logLevel: 'none' } },
        },
      },
    });
    const result = Extractor.invoke(config, {
      localBuild: false,
      showVerboseMessages: false,
      messageCallback: (message) => {
        // Printed once below if the report differs; the rest is noise here.
        if (message.messageId === 'console-api-report-changed') message.handled = true;
        if (message.messageId === 'console-api-report-copied') message.handled = true;
        if (message.messageId === 'console-api-report-not-copied') message.handled = true;
        if (message.messageId === 'console-api-report-created') message.handled = true;
        if (message.messageId === 'console-api-report-unchanged') message.handled = true;
        if (message.messageId === 'console-preamble') message.handled = true;
        if (message.messageId === 'console-compiler-version-notice') message.handled = true;
      },
    });
    reports++;
    if (!result.succeeded && !result.apiReportChanged) {
      console.error(`api report: packages/${name}: api-extractor failed on ${types}`);
      process.exitCode = 1;
    }
    const built = normalized(readFileSync(join(scratch, name, `${entry}.api.md`), 'utf8'));
    const target = join(dir, 'api', `${entry}.api.md`);
    if (!check) writeFileSync(target, built);
    else if (readFileSync(target, 'utf8') !== built)
      differs.push(`packages/${name}/api/${entry}.api.md`);
  }
}
rmSync(scratch, { recursive: true, force: true });

if (aliased.length > 0) {
  console.error(
    `api report: declarations export names under a bundler's short alias (see aliasedExports):\n  ${aliased.join('\n  ')}`,
  );
  process.exitCode = 1;
}
if (differs.length > 0) {
  console.error(
    `api report: the public surface changed; these reports differ from the build:\n  ${differs.join('\n  ')}\n` +
      'If the change is meant, run `pnpm build && pnpm api:update` and commit the reports with it.',
  );
  process.exitCode = 1;
} else if (process.exitCode !== 1) {
  console.log(`api report: ${reports} reports ${check ? 'match the build' : 'written'}`);
}
