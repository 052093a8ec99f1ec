import { defineConfig } from 'vitest/config';

// One file runs the READMEs' blocks one after another (they share the packed npm project and the
// repository's outputs); the directives' own tests run beside it.
export default defineConfig({
  test: { name: 'docs', include: ['src/**/*.test.ts'], fileParallelism: false },
});
