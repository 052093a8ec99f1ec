#!/usr/bin/env node
import { runWithNativeNoiseFiltered } from '@webshard/collectives/node';

// Dawn's and Mesa's own lines on stderr are dropped by a parent process that runs this again as
// its child (see [Note: quiet native stderr in the CLIs] in @webshard/collectives); the run itself
// is loaded only in the child. No top-level await: the package also builds as CommonJS.
async function start(): Promise<void> {
  await runWithNativeNoiseFiltered();
  const { removePendingOutputs } = await import('./io/atomic-write.js');
  const { main } = await import('./run-cli.js');
  const { stopOnSignals } = await import('./interrupt.js');

  // Relative paths are the user's: pnpm runs scripts in the package's directory but passes the
  // directory it was called from as INIT_CWD.
  const cwd = process.env.INIT_CWD ?? process.cwd();
  // The first SIGINT or SIGTERM stops the run after its current step; a second one ends the
  // process at once ([Note: interrupts] in interrupt.ts).
  const { flag: stop } = stopOnSignals(removePendingOutputs);
  // A closed pipe (`webshard-train --help | head`) is not an error of the run.
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
  });
  main(process.argv.slice(2), {
    stdout: (text) => process.stdout.write(text),
    stderr: (text) => process.stderr.write(text),
    isTTY: process.stdout.isTTY === true,
    cwd,
    stop,
    // The bar fits the terminal, and is drawn again when it is resized (SIGWINCH).
    terminal: {
      columns: () => process.stdout.columns ?? 80,
      onResize: (redraw) => {
        process.stdout.on('resize', redraw);
        return () => process.stdout.off('resize', redraw);
      },
    },
  }).then(({ exitCode }) => {
    // Exit now: a WebGPU device still open would keep the event loop alive.
    process.exit(exitCode);
  });
}

start().catch((error: unknown) => {
  process.stderr.write(
    `webshard-train: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
