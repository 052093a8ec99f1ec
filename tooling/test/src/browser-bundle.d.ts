/**
 * Bundles `entry` for the browser with esbuild and lists the Node built-ins it reached
 * (`importer: module`, importers relative to `root`), the bundled files and the bundle's code.
 */
export function bundleForBrowser(
  entry: string,
  root: string,
): Promise<{ nodeImports: string[]; inputs: string[]; code: string }>;
