#!/usr/bin/env node
// webshard-consolidate DIR OUT.safetensors: one safetensors file from a sharded FSDP checkpoint.
import { consolidateCheckpoint } from '../checkpoint/consolidate.js';

const [dir, out] = process.argv.slice(2);
if (dir === undefined || out === undefined || dir === '--help' || dir === '-h') {
  const usage =
    'usage: webshard-consolidate DIR OUT.safetensors\n  writes the full parameters of the sharded checkpoint in DIR as one safetensors file\n';
  (dir === '--help' || dir === '-h' ? process.stdout : process.stderr).write(usage);
  process.exit(dir === '--help' || dir === '-h' ? 0 : 2);
}
try {
  const names = await consolidateCheckpoint(dir, out);
  process.stdout.write(`wrote ${names.length} tensors to ${out}\n`);
} catch (error) {
  process.stderr.write(`webshard-consolidate: ${(error as Error).message}\n`);
  process.exit(2);
}
