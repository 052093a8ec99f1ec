import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';

/** uPlot's browser build and stylesheet, inlined into a report. */
export interface UplotAssets {
  js: string;
  css: string;
}

/** uPlot 1.x from node_modules (Node only: `#platform`'s `uplotAssets`). */
export async function readUplotAssets(): Promise<UplotAssets> {
  const require = createRequire(import.meta.url);
  const js = require.resolve('uplot/dist/uPlot.iife.min.js');
  const css = require.resolve('uplot/dist/uPlot.min.css');
  return { js: await readFile(js, 'utf8'), css: await readFile(css, 'utf8') };
}
