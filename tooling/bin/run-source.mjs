// [Note: bin shims]
// A package's `bin` entries point at small committed files under `bin/` (not at `dist/`), so
// `pnpm install` on a fresh clone links them without `WARN Failed to create bin ... ENOENT`, and
// the commands work before a build. A shim runs the built CLI when `dist/` has it (always, in a
// published tarball: `files` ships both), else, in this repository before `pnpm build`, the
// TypeScript source through this runner: a child `node --conditions=@webshard/source --import tsx
// src/....ts ARGS` whose exit code (or signal) becomes the shim's, so sibling packages are read
// from source exactly as the root scripts (`pnpm webshard-train`) read them, worker threads
// included (they inherit the flags). SIGTERM and SIGHUP go on to the child; SIGINT reaches both
// from the terminal, and the shim waits for the child. `tooling/docs/src/bin-shims.test.ts`
// runs every bin both ways.
import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import { fileURLToPath } from 'node:url';

/**
 * Runs `source` (a `.ts` file URL) in a child Node with the source condition and tsx, passing this
 * process's arguments, and exits as the child does. Never resolves.
 * @param {URL} source
 * @returns {Promise<never>}
 */
export function runSource(source) {
  const tsx = import.meta.resolve('tsx');
  const child = spawn(
    process.execPath,
    [
      '--conditions=@webshard/source',
      '--import',
      tsx,
      ...process.execArgv,
      fileURLToPath(source),
      ...process.argv.slice(2),
    ],
    { stdio: 'inherit' },
  );
  const forward = (signal) => () => child.kill(signal);
  for (const signal of ['SIGTERM', 'SIGHUP']) process.on(signal, forward(signal));
  process.on('SIGINT', () => {});
  child.once('error', (error) => {
    process.stderr.write(`could not start ${fileURLToPath(source)}: ${error.message}\n`);
    process.exit(1);
  });
  child.once('close', (code, signal) => {
    if (signal !== null) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
      process.exit(128 + (constants.signals[signal] ?? 0));
    }
    process.exit(code ?? 1);
  });
  return new Promise(() => {});
}
