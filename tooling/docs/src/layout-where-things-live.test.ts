import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs module of the layout check, without types
import { checkWhereThingsLive, relativeImports } from '../../layout/where-things-live.mjs';

const README = (rows: string, header = '| file | what it holds | may import |') => `# a

## Where things live

${header}
| --- | --- | --- |
${rows}

## Benchmarks
`;

const FILES: Record<string, string> = {
  'src/errors.ts': 'export class AError extends Error {}\n',
  'src/plan.ts': "import { AError } from './errors.js';\n",
  'src/group/queue.ts': "import type { Plan } from '../plan.js';\n",
  'src/group/work.ts': "import { queue } from './queue.js';\n",
  'src/top.ts': "import { queue } from './group/queue.js';\nimport '@webshard/tensor-core';\n",
  'src/kernels/reduce.wat': '(module)',
};

const ROWS = [
  '| `src/errors.ts` | the errors | nothing |',
  '| `src/plan.ts` | the plan | errors, tensor-core |',
  '| `src/group/` | the queue and its work | plan (types) |',
  '| `src/top.ts` | the top | all of the above |',
  '| `src/kernels/` | WAT | nothing |',
].join('\n');

const check = (rows: string, files: Record<string, string> = FILES, header?: string): string[] =>
  checkWhereThingsLive('packages/a', README(rows, header), new Map(Object.entries(files)), [
    'tensor-core',
    'collectives',
  ]);

describe("check:layout's where-things-live check (tooling/layout/where-things-live.mjs)", () => {
  it('passes when every row names paths that exist and the imports its files make', () => {
    expect(check(ROWS)).toEqual([]);
  });

  it('names a source file that no row holds (the entry, errors and generated files aside)', () => {
    const files = { ...FILES, 'src/index.ts': '', 'src/stray.ts': '', 'bench/run.ts': '' };
    expect(check(ROWS.replace('| `src/errors.ts` | the errors | nothing |\n', ''), files)).toEqual([
      'packages/a/README.md: where things live: `src/stray.ts` is in no row (add it to the row of its folder, or a row)',
    ]);
  });

  it('names a path that does not exist, and a row that names none', () => {
    expect(
      check(
        `${ROWS}\n| \`src/gone.ts\`, \`also-gone/\` | gone | nothing |\n| no path | x | nothing |`,
      ),
    ).toEqual([
      'packages/a/README.md: where things live: `src/gone.ts` does not exist',
      'packages/a/README.md: where things live: `src/also-gone/` does not exist',
      'packages/a/README.md: where things live: the row "no path" names no path',
    ]);
  });

  it('names an import the column does not name, once per row and target', () => {
    const rows = ROWS.replace('| errors, tensor-core |', '| tensor-core |');
    expect(check(rows)).toEqual([
      'packages/a/README.md: where things live: `src/plan.ts` imports `src/errors.ts`, but the import column of its row (`src/plan.ts`: "tensor-core") does not name "errors"',
    ]);
  });

  it('allows what a named row may import, and type imports only where the name says (types)', () => {
    // top names plan, and plan may import errors: top may import errors too.
    const rows = ROWS.replace('| all of the above |', '| plan, group |');
    const files = { ...FILES, 'src/top.ts': "import { AError } from './errors.js';\n" };
    expect(check(rows, files)).toEqual([]);
    // group names plan for its types: what plan may import, group may import as types only.
    const typed = {
      ...FILES,
      'src/group/work.ts': "import type { AError } from '../errors.js';\n",
    };
    expect(check(ROWS, typed)).toEqual([]);
    const untyped = { ...FILES, 'src/group/work.ts': "import { AError } from '../errors.js';\n" };
    expect(check(ROWS, untyped)).toHaveLength(1);
    const runtime = { ...FILES, 'src/group/queue.ts': "import { plan } from '../plan.js';\n" };
    expect(check(ROWS, runtime)).toEqual([
      'packages/a/README.md: where things live: `src/group/queue.ts` imports `src/plan.ts`, but the import column of its row (`src/group/`: "plan (types)") does not name "plan"',
    ]);
  });

  it('reads `file.ts` also imports clauses, and names a clause it cannot read or an unknown name', () => {
    const up = { ...FILES, 'src/plan.ts': "import { queue } from './group/queue.js';\n" };
    const also = ROWS.replace(
      '| errors, tensor-core |',
      '| errors; `plan.ts` also imports group |',
    );
    expect(check(also, up)).toEqual([]);
    const unreadable = ROWS.replace('| errors, tensor-core |', '| errors; and more |');
    expect(check(unreadable)).toEqual([
      'packages/a/README.md: where things live: the row of `src/plan.ts`: cannot read "and more" (after a \';\', write `file.ts` also imports a, b)',
    ]);
    const unknown = ROWS.replace('| errors, tensor-core |', '| errors, planner |');
    expect(check(unknown)).toEqual([
      'packages/a/README.md: where things live: the row of `src/plan.ts` names "planner" in its import column, which is no row, no file of src/ and no package',
    ]);
  });

  it('checks only the paths of a table without an import column', () => {
    const rows = '| `src/errors.ts` | the errors |\n| `src/plan.ts` | the plan |';
    expect(check(rows, FILES, '| file | what |')).toEqual([]);
  });

  it('reads type-only imports, `import { type A }` included, and import()', () => {
    const text = [
      "import type { A } from './a.js';",
      "import { type B, type C } from './b.js';",
      "import { type D, e } from './d.js';",
      "export { f } from './f.js';",
      "const g = await import('./g.js');",
    ].join('\n');
    expect(relativeImports(text)).toEqual([
      { spec: './a.js', types: true },
      { spec: './b.js', types: true },
      { spec: './d.js', types: false },
      { spec: './f.js', types: false },
      { spec: './g.js', types: false },
    ]);
  });
});
