// The layout checks of CI (#14): no source file over 500 lines (tests and generated files aside),
// no import that goes up a layer or into another package's files, and no cycle of runtime imports
// inside a package. Exits 1 listing every violation. Run from the repository root:
// `node tooling/layout/check-layout.mjs`.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { checkNotes } from './notes.mjs';
import { checkWhereThingsLive } from './where-things-live.mjs';

const root = resolve(new URL('../..', import.meta.url).pathname);
const MAX_LINES = 500;

// Files known to be too long, each waiting for its split in the layout issue (#14). A file may
// leave this list, never join it.
const TOO_LONG_FOR_NOW = new Set([]);

// Which workspace packages each may import: each layer only those below it.
const LAYERS = {
  '@webshard/tensor-core': [],
  '@webshard/collectives': ['@webshard/tensor-core'],
  '@webshard/fsdp': ['@webshard/tensor-core', '@webshard/collectives'],
  '@webshard/ddp-buckets': ['@webshard/tensor-core', '@webshard/collectives'],
  '@webshard/offload': ['@webshard/tensor-core', '@webshard/collectives'],
  '@webshard/diloco': ['@webshard/tensor-core', '@webshard/collectives'],
  '@webshard/trainer': [
    '@webshard/tensor-core',
    '@webshard/collectives',
    '@webshard/fsdp',
    '@webshard/ddp-buckets',
    '@webshard/offload',
    '@webshard/diloco',
  ],
  '@webshard/playground': ['@webshard/tensor-core', '@webshard/trainer'],
};
// Cycles of runtime imports known to be there, each the files of one strongly connected group. A
// cycle found must lie inside one of these: a file may leave a group, never join one.
const KNOWN_CYCLES = [
  // The gradient table computes gradients with the ops, and every op records through the table.
  [
    'packages/tensor-core/src/autograd/gradients.ts',
    // Entries of the table in files of their own, computing with the ops as the table does.
    'packages/tensor-core/src/autograd/folded-weight-grad.ts',
    'packages/tensor-core/src/autograd/layout-gradients.ts',
    'packages/tensor-core/src/autograd/linear-gradient.ts',
    'packages/tensor-core/src/autograd/attention-gradient.ts',
    'packages/tensor-core/src/autograd/record.ts',
    // The autocast policy casts an op's inputs with the recorded `cast` op, inside each op.
    'packages/tensor-core/src/ops/autocast-policy.ts',
    'packages/tensor-core/src/ops/attention-heads.ts',
    'packages/tensor-core/src/ops/cast.ts',
    'packages/tensor-core/src/ops/elementwise.ts',
    'packages/tensor-core/src/ops/index.ts',
    'packages/tensor-core/src/ops/linalg.ts',
    'packages/tensor-core/src/ops/nn.ts',
    'packages/tensor-core/src/ops/reduce.ts',
    'packages/tensor-core/src/ops/shape.ts',
  ],
];

// Cycles that exist only through type imports, each the files of one strongly connected group,
// known on main when the check began counting them (#36): a file may leave a group, never join
// one. Each names why it is still here.
const KNOWN_TYPE_CYCLES = [
  // An operand names its staging copy's type, and the staging copy the operand's dtypes.
  ['packages/collectives/src/operand-staging.ts', 'packages/collectives/src/operand.ts'],
  // The arena is made by and reports to its transport.
  [
    'packages/collectives/src/transports/shm/shm-arena.ts',
    'packages/collectives/src/transports/shm/shm-transport.ts',
  ],
  // The shared collective suite's cases, failures and reference take the suite's context type.
  [
    'packages/collectives/src/suites/suite-cases.ts',
    'packages/collectives/src/suites/suite-failures.ts',
    'packages/collectives/src/suites/suite-reference.ts',
    'packages/collectives/src/suites/suite.ts',
  ],
  // A tensor, its autograd node and the engine that runs the nodes name each other's types.
  [
    'packages/tensor-core/src/autograd/engine.ts',
    'packages/tensor-core/src/autograd/node.ts',
    'packages/tensor-core/src/autograd/ready-queue.ts',
    'packages/tensor-core/src/move.ts',
    'packages/tensor-core/src/scope.ts',
    'packages/tensor-core/src/tensor-brand.ts',
    'packages/tensor-core/src/tensor.ts',
  ],
];

const TOOLING = [
  '@webshard/bench',
  '@webshard/build',
  '@webshard/test-config',
  '@webshard/tsconfig',
];

function walk(dir, out = []) {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, out);
    else if (/\.(ts|mts|mjs|js)$/.test(name) && !name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/**
 * The files of `dir` that import each other at run time: static `import`/`export ... from` of a
 * relative path, not `import type`/`export type` (erased; `verbatimModuleSyntax` keeps
 * `import { type A }` as a runtime import) and not `import()` (loaded when called).
 */
function runtimeImports(files, withTypes = false) {
  const graph = new Map();
  const known = new Set(files);
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    const targets = [];
    for (const match of text.matchAll(
      /^(?:import|export)\s+(type\s+)?(?:[^'";]*?\s+from\s+)?['"](\.[^'"]+)['"]/gms,
    )) {
      if (match[1] !== undefined && !withTypes) continue;
      let target = resolve(dirname(file), match[2]);
      if (!known.has(target)) target = target.replace(/\.js$/, '.ts');
      if (!known.has(target) && existsSync(`${target}.ts`)) target = `${target}.ts`;
      if (known.has(target)) targets.push(target);
    }
    graph.set(file, targets);
  }
  return graph;
}

/** The strongly connected groups of more than one file (Tarjan), each with one cycle through it. */
function importCycles(graph) {
  let counter = 0;
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const groups = [];
  const visit = (v) => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v)) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
    }
    if (low.get(v) !== index.get(v)) return;
    const group = [];
    let w;
    do {
      w = stack.pop();
      onStack.delete(w);
      group.push(w);
    } while (w !== v);
    if (group.length > 1) groups.push(group);
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return groups.map((group) => {
    // One cycle through the group's first file, by breadth-first search back to it.
    const members = new Set(group);
    const start = group[0];
    const from = new Map([[start, null]]);
    const queue = [start];
    let end = null;
    while (queue.length > 0 && end === null) {
      const v = queue.shift();
      for (const w of graph.get(v)) {
        if (w === start) {
          end = v;
          break;
        }
        if (members.has(w) && !from.has(w)) {
          from.set(w, v);
          queue.push(w);
        }
      }
    }
    const path = [start];
    for (let v = end; v !== start; v = from.get(v)) path.splice(1, 0, v);
    return { files: group, path: [...path, start] };
  });
}

const problems = [];
for (const group of ['packages', 'apps']) {
  for (const pkg of readdirSync(join(root, group))) {
    const dir = join(root, group, pkg);
    let manifest;
    try {
      manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    } catch {
      continue;
    }
    const allowed = LAYERS[manifest.name];
    if (allowed === undefined) {
      problems.push(
        `${group}/${pkg}: package ${manifest.name} has no layer in tooling/layout/check-layout.mjs`,
      );
      continue;
    }
    const sources = walk(dir).filter((file) => !/\.test\.ts$/.test(file));
    for (const cycle of importCycles(runtimeImports(sources))) {
      const files = cycle.files.map((file) => relative(root, file).split(sep).join('/'));
      if (KNOWN_CYCLES.some((known) => files.every((file) => known.includes(file)))) continue;
      const path = cycle.path.map((file) => relative(dir, file).split(sep).join('/'));
      problems.push(
        `${group}/${pkg}: import cycle ${path.join(' -> ')} (break it: see the README's layers)`,
      );
    }
    // Type imports too: a cycle of types is still two files that cannot be read apart (#36).
    for (const cycle of importCycles(runtimeImports(sources, true))) {
      const files = cycle.files.map((file) => relative(root, file).split(sep).join('/'));
      const known = [...KNOWN_CYCLES, ...KNOWN_TYPE_CYCLES];
      if (known.some((group) => files.every((file) => group.includes(file)))) continue;
      const path = cycle.path.map((file) => relative(dir, file).split(sep).join('/'));
      const line = `${group}/${pkg}: import cycle (type imports included) ${path.join(' -> ')}`;
      if (!problems.some((p) => p.startsWith(`${group}/${pkg}: import cycle ${path.join(' -> ')}`)))
        problems.push(`${line} (break it: see the README's layers)`);
    }
    // The README's "where things live" rows name paths that exist, and imports the code keeps
    // ([Note: the import column of where things live]).
    if (existsSync(join(dir, 'README.md'))) {
      const files = new Map();
      const everyFile = (at) => {
        for (const name of readdirSync(at)) {
          if (['node_modules', 'dist', 'out', 'bench-results'].includes(name)) continue;
          if (name.startsWith('.')) continue;
          const path = join(at, name);
          if (statSync(path).isDirectory()) everyFile(path);
          else {
            const rel = relative(dir, path).split(sep).join('/');
            files.set(rel, /\.(ts|mts|mjs|js)$/.test(name) ? readFileSync(path, 'utf8') : '');
          }
        }
      };
      everyFile(dir);
      const packages = Object.keys(LAYERS).map((name) => name.replace('@webshard/', ''));
      const readme = readFileSync(join(dir, 'README.md'), 'utf8');
      problems.push(...checkWhereThingsLive(`${group}/${pkg}`, readme, files, packages));
    }
    for (const file of walk(dir)) {
      const rel = relative(root, file).split(sep).join('/');
      const text = readFileSync(file, 'utf8');
      const isTest = /\.test\.ts$/.test(file) || rel.includes('/__fixtures__/');
      // A benchmark may import a sibling package as the peer it is measured against (FSDP's
      // step against DDP's on the same model).
      const isBench = rel.includes('/bench/');
      const lines = text.split('\n').length;
      if (!isTest && !/generated/.test(file) && lines > MAX_LINES && !TOO_LONG_FOR_NOW.has(rel)) {
        problems.push(`${rel}: ${lines} lines (at most ${MAX_LINES}; split it by idea)`);
      }
      for (const match of text.matchAll(/(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g)) {
        const spec = match[1];
        if (spec.startsWith('@webshard/')) {
          const target = spec.split('/').slice(0, 2).join('/');
          if (target === manifest.name || TOOLING.includes(target)) continue;
          const peer =
            isBench && LAYERS[target] !== undefined && !LAYERS[target].includes(manifest.name);
          if (!allowed.includes(target) && !peer) {
            problems.push(
              `${rel}: imports ${spec}, above or beside ${manifest.name} in the layers`,
            );
          }
        } else if (spec.startsWith('.')) {
          const target = resolve(file, '..', spec);
          if (!target.startsWith(dir + sep)) {
            problems.push(`${rel}: imports ${spec}, outside its package (use the package's entry)`);
          }
        }
      }
    }
  }
}
// Every design note referred to is in the index of docs/architecture.md, which names the file
// that defines it (notes.mjs).
{
  const texts = new Map();
  const textFile = /\.(ts|mts|mjs|js|md|wgsl|wat)$/;
  const collect = (dir) => {
    for (const name of readdirSync(dir)) {
      if (['node_modules', 'dist', 'out', 'bench-results'].includes(name) || name.startsWith('.'))
        continue;
      const path = join(dir, name);
      if (statSync(path).isDirectory()) collect(path);
      else if (textFile.test(name) && !name.endsWith('.d.ts')) {
        const rel = relative(root, path).split(sep).join('/');
        // The check and its test name notes only as examples.
        const examples = ['tooling/layout/notes.mjs', 'tooling/docs/src/layout-notes.test.ts'];
        if (!examples.includes(rel)) texts.set(rel, readFileSync(path, 'utf8'));
      }
    }
  };
  for (const dir of ['packages', 'apps', 'tooling', 'docs']) collect(join(root, dir));
  texts.set('README.md', readFileSync(join(root, 'README.md'), 'utf8'));
  problems.push(...checkNotes(texts, texts.get('docs/architecture.md') ?? ''));
}
if (problems.length > 0) {
  console.error(
    `layout check: ${problems.length} problem(s)\n${problems.map((p) => `  ${p}`).join('\n')}`,
  );
  process.exit(1);
}
console.log(
  'layout check: every source file is at most 500 lines, imports only layers below it, no package has a new import cycle (type imports included), every design note is indexed where it is defined, and every "where things live" row names files that exist and the imports they make, and every source file lies in a row',
);
