import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

// The built package finds its communication worker's module (dist/comm-worker-main.js, the
// `comm-worker-main` tsup entry) from the chunk that starts it: two ranks in a plain `node`
// (no source condition: `@webshard/collectives` resolves to dist/) join with
// `progress: 'worker'` and all-reduce, from the ESM and the CommonJS build. Needs `pnpm build`
// (CI builds before it tests); skipped outside CI when dist/ is missing.
const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const built = existsSync(join(packageDir, 'dist', 'index.js'));

const body = (load: string) => `
const { initProcessGroup, WorkerGroup } = ${load};
const { createServer } = require('node:net');
const port = await new Promise((resolve) => {
  const server = createServer().listen(0, '127.0.0.1', () => {
    const { port } = server.address();
    server.close(() => resolve(port));
  });
});
const groups = await Promise.all([0, 1].map((rank) => initProcessGroup({
  progress: 'worker', rank, worldSize: 2, masterPort: port, token: 'built', timeoutMs: 20000,
})));
const data = groups.map((g) => Float32Array.from([g.rank + 1, 10]));
await Promise.all(groups.map((g, r) => g.allReduce(data[r]).wait()));
console.log(JSON.stringify({ worker: groups.every((g) => g instanceof WorkerGroup), sums: data.map((d) => [...d]) }));
await Promise.all(groups.map((g) => g.close()));
`;

const run = promisify(execFile);

describe.skipIf(!built && !process.env.CI)('the built package', () => {
  for (const format of ['esm', 'cjs'] as const) {
    it(`starts the communication worker from dist (${format})`, async () => {
      const script =
        format === 'esm'
          ? `import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);\n${body("await import('@webshard/collectives')")}`
          : `(async () => {${body("require('@webshard/collectives')")}})();`;
      const { stdout } = await run(
        process.execPath,
        [`--input-type=${format === 'esm' ? 'module' : 'commonjs'}`, '-e', script],
        { cwd: packageDir, timeout: 60_000 },
      );
      expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toEqual({
        worker: true,
        sums: [
          [3, 20],
          [3, 20],
        ],
      });
    }, 90_000);
  }
});
