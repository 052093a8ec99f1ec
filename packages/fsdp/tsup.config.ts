import { definePackageConfig } from '@webshard/build';
import { defineConfig } from 'tsup';

export default defineConfig({
  ...definePackageConfig({
    entry: {
      checkpoint: 'src/checkpoint/index.ts',
      'cli/webshard-consolidate': 'src/cli/webshard-consolidate.ts',
    },
  }),
  // The checkpoint entry and the bin share the state-dict code with the main entry: one copy, so
  // error classes are the same in both (instanceof holds).
  splitting: true,
});
