// The published manifests (#22): `exports` and `imports` carry a `@webshard/source` condition that
// points at src/ for this repo's tests and typecheck; src/ is not in the tarball, so pnpm publishes
// `publishConfig.exports` / `publishConfig.imports` instead: the same maps without that condition.
// `node tooling/package/publish-config.mjs` writes them from `exports`/`imports`; with `--check`
// it changes nothing and exits 1 if one is out of date (check-packed.mjs runs that check).
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const root = resolve(new URL('../..', import.meta.url).pathname);
const SOURCE = '@webshard/source';

/** `map` without the source condition, at any depth. */
export function stripSource(map) {
  if (map === null || typeof map !== 'object') return map;
  return Object.fromEntries(
    Object.entries(map)
      .filter(([key]) => key !== SOURCE)
      .map(([key, value]) => [key, stripSource(value)]),
  );
}

/** The published packages' directories. */
export function publishedPackages() {
  return readdirSync(join(root, 'packages'))
    .sort()
    .map((name) => join(root, 'packages', name))
    .filter((dir) => !JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).private);
}

/** Package directories whose publishConfig differs from what `exports`/`imports` give. */
export function syncPublishConfig(write) {
  const stale = [];
  for (const dir of publishedPackages()) {
    const file = join(dir, 'package.json');
    const text = readFileSync(file, 'utf8');
    const pkg = JSON.parse(text);
    const publishConfig = { ...pkg.publishConfig };
    if (pkg.exports) publishConfig.exports = stripSource(pkg.exports);
    if (pkg.imports) publishConfig.imports = stripSource(pkg.imports);
    const next = `${JSON.stringify({ ...pkg, publishConfig }, null, 2)}\n`;
    if (next === text) continue;
    stale.push(dir);
    if (write) writeFileSync(file, next);
  }
  return stale;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const check = process.argv.includes('--check');
  const stale = syncPublishConfig(!check);
  if (check && stale.length > 0) {
    console.error(
      `publishConfig is out of date in:\n  ${stale.join('\n  ')}\nrun \`node tooling/package/publish-config.mjs\``,
    );
    process.exit(1);
  }
  console.log(`publishConfig: ${stale.length} package(s) ${check ? 'stale' : 'written'}`);
}
