// Plain JavaScript with a declaration file beside it, like index.js.
import { builtinModules } from 'node:module';
import { relative } from 'node:path';
import { build } from 'esbuild';

const builtins = new Set(builtinModules);

/**
 * Bundles `entry` as a web app would (esbuild, `platform: 'browser'`, which adds the `browser`
 * condition; `@webshard/source` so sibling packages are read from source) and returns every Node
 * built-in some module tried to import, as `importer: module` with the importer relative to `root`,
 * the bundled files (relative to the working directory) and the bundle's code (one ES module). Built-ins are recorded and left
 * external instead of failing the build, so one run lists all of them.
 * @param {string} entry
 * @param {string} root
 * @returns {Promise<{ nodeImports: string[]; inputs: string[]; code: string }>}
 */
export async function bundleForBrowser(entry, root) {
  /** @type {string[]} */
  const nodeImports = [];
  /** @type {import('esbuild').Plugin} */
  const recordBuiltins = {
    name: 'record-node-builtins',
    setup(pluginBuild) {
      pluginBuild.onResolve({ filter: /.*/ }, (args) => {
        const bare = args.path.replace(/^node:/, '').split('/')[0] ?? '';
        if (!args.path.startsWith('node:') && !builtins.has(bare)) return undefined;
        nodeImports.push(`${relative(root, args.importer)}: ${args.path}`);
        return { path: args.path, external: true };
      });
    },
  };
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    conditions: ['@webshard/source'],
    metafile: true,
    logLevel: 'silent',
    plugins: [recordBuiltins],
  });
  const code = result.outputFiles[0]?.text ?? '';
  return { nodeImports, inputs: Object.keys(result.metafile.inputs), code };
}
