import { definePackageConfig } from '@webshard/build';
import { defineConfig } from 'tsup';

export default defineConfig({
  ...definePackageConfig({
    entry: {
      'cli/webshard-run': 'src/cli/webshard-run.ts',
      // The communication worker's module, started from beside the chunks (comm-worker/start-worker.ts).
      'comm-worker-main': 'src/comm-worker/comm-worker-main.ts',
      node: 'src/entries/node.ts',
      'platform/browser': 'src/platform/browser.ts',
      'platform/node': 'src/platform/node.ts',
      testing: 'src/suites/index.ts',
      transports: 'src/entries/transports.ts',
    },
    // The testing entry runs inside the user's vitest; `#platform` stays an import so the
    // consumer's resolver picks the Node or browser file ([Note: the collectives platform module]).
    external: ['vitest', '#platform'],
  }),
  // Code shared by the entries goes in common chunks, so `./node`'s workers build the main entry's
  // ProcessGroup and throw its error classes (not a second copy that fails `instanceof`), and the
  // Node-only modules the main entry loads with `import()` stay out of its static graph (inlined,
  // their `node:` imports would sit at the top of dist/index.js). See [Note: the node entry].
  splitting: true,
});
