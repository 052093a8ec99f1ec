import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * The folder of the playground's build (apps/playground, `pnpm build`), which the page server of a
 * `--browser-ranks` run serves as its join page ([Note: the playground's join mode] in the
 * playground): `WEBSHARD_PLAYGROUND_DIR` when set (`off` for none), else `apps/playground/dist`
 * beside this app in the repository. Null when it holds no `index.html`: the run then serves its
 * own minimal page (ranks/browser-page.ts), which runs the same rank.
 */
export function playgroundDir(env: NodeJS.ProcessEnv = process.env): string | null {
  const asked = env.WEBSHARD_PLAYGROUND_DIR;
  if (asked === 'off') return null;
  // This file is one folder below the app's root, in src/ and in dist/ alike.
  const dir = asked ?? fileURLToPath(new URL('../../playground/dist/', import.meta.url));
  return existsSync(`${dir.replace(/\/$/, '')}/index.html`) ? dir : null;
}
