/**
 * Bundles `entry` for the browser with esbuild and lists the Node built-ins it reached
 * (`importer: module`, importers relative to `root`) and the bundled files.
 */
export function bundleForBrowser(
  entry: string,
  root: string,
): Promise<{ nodeImports: string[]; inputs: string[] }>;
