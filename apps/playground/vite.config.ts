import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { defineConfig } from 'vite';

/** The trainer's shipped corpus folder (`data/sonnets.txt`), served beside the page. */
const trainerData = join(
  dirname(createRequire(import.meta.url).resolve('@webshard/trainer/package.json')),
  'data',
);

/**
 * Cross-origin isolation: the page then has `SharedArrayBuffer`, and the CPU backend runs its
 * matmul on several Web Workers ([Note: matmul threads] in tensor-core). A host that cannot send
 * these headers still serves a working page, on one CPU thread.
 */
const ISOLATED = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

// The packages come from their source (`@webshard/source`), with their `browser` files: the page
// is built beside them, from the same commit, and needs no package built first.
export default defineConfig({
  base: './',
  publicDir: trainerData,
  resolve: {
    conditions: ['@webshard/source', 'browser', 'module', 'import', 'default'],
  },
  worker: { format: 'es' },
  server: { headers: ISOLATED, port: 5173, strictPort: false },
  preview: { headers: ISOLATED, port: 4173 },
  build: {
    target: 'es2022',
    outDir: 'dist',
    chunkSizeWarningLimit: 2048,
    reportCompressedSize: false,
  },
});
