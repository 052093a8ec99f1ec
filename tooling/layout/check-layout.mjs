// The layout checks of CI (#14): no source file over 500 lines (tests and generated files aside),
// and no import that goes up a layer or into another package's files. Exits 1 listing every
// violation. Run from the repository root: `node tooling/layout/check-layout.mjs`.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';

const root = resolve(new URL('../..', import.meta.url).pathname);
const MAX_LINES = 500;

// Files known to be too long, each waiting for its split in the layout issue (#14). A file may
// leave this list, never join it.
const TOO_LONG_FOR_NOW = new Set([
  'packages/collectives/src/transports/tcp/tcp-transport.ts',
  'packages/collectives/src/transports/ws/ws-transport.ts',
  'packages/collectives/src/transports/shm/shm-transport.ts',
  'packages/collectives/src/testing/suite.ts',
  'packages/tensor-core/src/backend/webgpu/webgpu-backend.ts',
]);

// Which workspace packages each may import: each layer only those below it.
const LAYERS = {
  '@webshard/tensor-core': [],
  '@webshard/collectives': ['@webshard/tensor-core'],
  '@webshard/fsdp': ['@webshard/tensor-core', '@webshard/collectives'],
  '@webshard/ddp-buckets': ['@webshard/tensor-core', '@webshard/collectives'],
  '@webshard/offload': ['@webshard/tensor-core', '@webshard/collectives'],
  '@webshard/trainer': [
    '@webshard/tensor-core',
    '@webshard/collectives',
    '@webshard/fsdp',
    '@webshard/ddp-buckets',
    '@webshard/offload',
  ],
};
const TOOLING = ['@webshard/bench', '@webshard/build', '@webshard/test-config', '@webshard/tsconfig'];

function walk(dir, out = []) {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, out);
    else if (/\.(ts|mts|mjs|js)$/.test(name) && !name.endsWith('.d.ts')) out.push(path);
  }
  return out;
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
      problems.push(`${group}/${pkg}: package ${manifest.name} has no layer in tooling/layout/check-layout.mjs`);
      continue;
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
          const peer = isBench && LAYERS[target] !== undefined && !LAYERS[target].includes(manifest.name);
          if (!allowed.includes(target) && !peer) {
            problems.push(`${rel}: imports ${spec}, above or beside ${manifest.name} in the layers`);
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
if (problems.length > 0) {
  console.error(`layout check: ${problems.length} problem(s)\n${problems.map((p) => `  ${p}`).join('\n')}`);
  process.exit(1);
}
console.log('layout check: every source file is at most 500 lines and imports only layers below it');
