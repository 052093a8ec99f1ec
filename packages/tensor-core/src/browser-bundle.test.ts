import { builtinModules } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Plugin } from 'esbuild';
import { describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));
const packageRoot = dirname(here);
const builtins = new Set(builtinModules);

/**
 * Bundles `entry` as a web app would (esbuild, `platform: 'browser'`, which adds the `browser`
 * condition) and returns every Node built-in some module tried to import, as `importer: module`,
 * and the files that went into the bundle. Built-ins are recorded and left external instead of
 * failing the build, so one run lists all of them.
 */
export async function bundleForBrowser(
  entry: string,
): Promise<{ nodeImports: string[]; inputs: string[] }> {
  const nodeImports: string[] = [];
  const recordBuiltins: Plugin = {
    name: 'record-node-builtins',
    setup(pluginBuild) {
      pluginBuild.onResolve({ filter: /.*/ }, (args) => {
        const bare = args.path.replace(/^node:/, '');
        if (!args.path.startsWith('node:') && !builtins.has(bare.split('/')[0]!)) return undefined;
        nodeImports.push(`${relative(packageRoot, args.importer)}: ${args.path}`);
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
  return { nodeImports, inputs: Object.keys(result.metafile.inputs) };
}

describe('browser bundle', () => {
  it('the root entry bundles for the browser with no Node built-in in it', async () => {
    const { nodeImports, inputs } = await bundleForBrowser(join(here, 'index.ts'));
    expect(nodeImports).toEqual([]);
    // `#platform` resolved to the browser file, and neither the Node file nor Dawn came along.
    expect(inputs).toContain('src/platform/browser.ts');
    expect(inputs.filter((file) => /platform\/node\.ts|\/webgpu\/index\.js/.test(file))).toEqual(
      [],
    );
    // The walk saw the whole package: the WebGPU backend and safetensors are in the bundle.
    expect(inputs).toContain('src/backend/webgpu/webgpu-backend.ts');
    expect(inputs).toContain('src/io/safetensors.ts');
  });

  it('catches a Node import (the Node file of #platform has them)', async () => {
    const { nodeImports } = await bundleForBrowser(join(here, 'platform', 'node.ts'));
    expect(nodeImports).toContain('src/platform/node.ts: node:fs/promises');
  });
});
