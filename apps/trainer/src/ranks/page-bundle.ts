import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

/**
 * The browser bundle of ./browser-page.ts, as one ES module's code. A built trainer ships it
 * (`dist/browser-rank.js`, a browser build in tsup.config.ts); from source (tsx) it is bundled
 * now with esbuild, the `browser` condition picking every package's browser files ([Note: the
 * trainer's platform module]) and `@webshard/source` reading the sibling packages' source.
 */
export async function rankPageBundle(): Promise<string> {
  if (!import.meta.url.endsWith('.ts')) {
    return readFile(fileURLToPath(new URL('./browser-rank.js', import.meta.url)), 'utf8');
  }
  const { build } = await import('esbuild');
  const result = await build({
    entryPoints: [fileURLToPath(new URL('./browser-page.ts', import.meta.url))],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    conditions: ['@webshard/source'],
    logLevel: 'error',
  });
  return result.outputFiles[0]!.text;
}
