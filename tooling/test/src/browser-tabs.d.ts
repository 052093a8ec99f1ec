/**
 * Serves `files` from 127.0.0.1 and opens `paths` as tabs of a headless Chromium that no DevTools
 * client drives; each page reports by POSTing `{ ok, value | error }` to `/result?tab=<i>`.
 */
export function openTabs(
  files: Record<string, { type: string; body: string }>,
  paths: string[],
  options?: { args?: string[] },
): Promise<{ results: Promise<unknown>[]; close(): Promise<void> }>;
