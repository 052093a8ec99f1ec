#!/usr/bin/env node
// webshard-consolidate DIR OUT.safetensors: one safetensors file from a sharded FSDP checkpoint.
import { consolidateCheckpoint } from '../checkpoint/consolidate.js';

const USAGE =
  'usage: webshard-consolidate DIR OUT.safetensors\n  writes the full parameters of the sharded checkpoint in DIR as one safetensors file\n';

async function main(args: string[]): Promise<number> {
  const [dir, out] = args;
  if (dir === '--help' || dir === '-h') {
    process.stdout.write(USAGE);
    return 0;
  }
  if (dir === undefined || out === undefined) {
    process.stderr.write(USAGE);
    return 2;
  }
  try {
    const names = await consolidateCheckpoint(dir, out);
    process.stdout.write(`wrote ${names.length} tensors to ${out}\n`);
    return 0;
  } catch (error) {
    process.stderr.write(`webshard-consolidate: ${(error as Error).message}\n`);
    return 2;
  }
}

void main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
