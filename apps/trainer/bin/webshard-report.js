#!/usr/bin/env node
// The `webshard-report` bin: the built report CLI, or before `pnpm build` in the webshard repository its source
// through tsx ([Note: bin shims] in tooling/bin/run-source.mjs).
import { existsSync } from 'node:fs';

const built = new URL('../dist/report-cli.js', import.meta.url);
if (existsSync(built)) await import(built.href);
else {
  const runner = new URL('../../../tooling/bin/run-source.mjs', import.meta.url);
  const { runSource } = await import(runner.href);
  await runSource(new URL('../src/report-cli.ts', import.meta.url));
}
