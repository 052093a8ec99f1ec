import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The playground's folder (where vite.config.ts is). */
export const APP_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The page built now into a temporary folder (never a stale `dist/`), served by Vite's preview
 * server on 127.0.0.1 with the config's headers (cross-origin isolation); `close` removes both.
 */
export async function buildAndServe(): Promise<{
  url: string;
  outDir: string;
  close(): Promise<void>;
}> {
  const { build, preview } = await import('vite');
  const outDir = await mkdtemp(join(tmpdir(), 'webshard-playground-'));
  await build({ root: APP_ROOT, logLevel: 'error', build: { outDir, emptyOutDir: true } });
  const server = await preview({
    root: APP_ROOT,
    logLevel: 'error',
    build: { outDir },
    preview: { host: '127.0.0.1', port: 0, strictPort: false, open: false },
  });
  const url = server.resolvedUrls?.local[0];
  if (url === undefined) throw new Error('vite preview printed no local address');
  return {
    url,
    outDir,
    close: async () => {
      await server.close();
      await rm(outDir, { recursive: true, force: true });
    },
  };
}
