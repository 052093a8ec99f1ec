#!/usr/bin/env node
import { WebshardError } from '@webshard/tensor-core';
import { launch } from '../launcher/launcher.js';
import { browserJoin } from './browser-ranks.js';
import { runWithNativeNoiseFiltered } from './native-noise.js';
import { parseArgs, USAGE } from './parse-args.js';

/** `webshard-run`: torchrun for webshard. See `USAGE`. */
async function main(argv: readonly string[]): Promise<number> {
  let options: ReturnType<typeof parseArgs>;
  try {
    options = parseArgs(argv);
  } catch (error) {
    if (!WebshardError.isInstance(error)) throw error;
    process.stderr.write(`${(error as Error).message}\n\n${USAGE}\n`);
    return 2;
  }
  if (options === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  let result: Awaited<ReturnType<typeof launch>>;
  try {
    if (
      (options.browserRanks ?? 0) > 0 &&
      options.ranksAs === 'processes' &&
      (options.nnodes ?? 1) === 1
    ) {
      const join = await browserJoin(options);
      for (const line of join.warnings) process.stderr.write(`${line}\n`);
      for (const line of join.lines) process.stdout.write(`${line}\n`);
      options = join.options;
    }
    result = await launch(options);
  } catch (error) {
    // Options that only conflict once combined (--ranks-as threads with --nnodes 2, a missing
    // token): the same short message as a bad flag, not a stack.
    if (!WebshardError.isInstance(error)) throw error;
    process.stderr.write(`${(error as Error).message}\n`);
    return 2;
  }
  if (result.failedRank !== undefined) {
    process.stderr.write(
      `[webshard-run] rank ${result.failedRank} failed with exit code ${result.exitCode}; stopped the other ranks\n`,
    );
  }
  return result.exitCode;
}

// Dawn's and Mesa's own lines on stderr are dropped: see [Note: quiet native stderr in the CLIs].
runWithNativeNoiseFiltered()
  .then(() => main(process.argv.slice(2)))
  .then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      process.stderr.write(`[webshard-run] ${(error as Error).stack ?? String(error)}\n`);
      process.exitCode = 1;
    },
  );
