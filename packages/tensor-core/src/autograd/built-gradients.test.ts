import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { gradients } from './gradients.js';

// The gradient table as the built package has it. The table and the files whose gradients it
// names are in the ops' import cycle, so tsup's bundles choose the order they evaluate in, and an
// entry made from a constant of another file can be undefined there while the source is whole:
// "no gradient is defined for op 'reshape'" came only from dist, in the trainer's Slurm ranks
// (stop 78's note). A plain `node` (no source condition: the package resolves to dist/) loads each
// entry point, ESM and CommonJS, and lists the table's entries that have a backward; they must be
// the source's, every one. Needs `pnpm build` (CI builds before it tests); skipped outside CI when
// dist/ is missing.
const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const built = existsSync(join(packageDir, 'dist', 'autograd.js'));
const run = promisify(execFile);

const list = `const names = Object.entries(table.gradients)
  .filter(([, def]) => def !== undefined && typeof def.backward === 'function')
  .map(([name]) => name)
  .sort();
console.log(JSON.stringify({ names, size: Object.keys(table.gradients).length }));`;

/** The table's names with a backward, from dist, loading `first` before the autograd entry. */
async function builtTable(format: 'esm' | 'cjs', first: string | null): Promise<unknown> {
  const load = (specifier: string) =>
    format === 'esm' ? `await import('${specifier}')` : `require('${specifier}')`;
  const body = `${first === null ? '' : `${load(first)};\n`}const table = ${load('@webshard/tensor-core/autograd')};\n${list}`;
  const script = format === 'esm' ? body : `(async () => {${body}})();`;
  const { stdout } = await run(
    process.execPath,
    [`--input-type=${format === 'esm' ? 'module' : 'commonjs'}`, '-e', script],
    { cwd: packageDir, timeout: 60_000 },
  );
  return JSON.parse(stdout.trim().split('\n').at(-1)!);
}

// Skipped only outside CI where dist/ is missing (no `pnpm build` yet); CI builds first, so it runs.
describe.skipIf(!built && !process.env.CI)('the built gradient table', () => {
  const names = Object.keys(gradients).sort();
  for (const format of ['esm', 'cjs'] as const) {
    for (const first of [null, '@webshard/tensor-core']) {
      it(`has every entry of the source's, each with a backward (${format}${first === null ? '' : `, ${first} loaded first`})`, async () => {
        expect(names.length).toBeGreaterThan(30);
        expect(await builtTable(format, first)).toEqual({ names, size: names.length });
      }, 90_000);
    }
  }
});
