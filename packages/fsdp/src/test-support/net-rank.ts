// A rank started by webshard-run: trains the parity run over the transport in argv[2] and prints
// its result as one JSON line.
import { initProcessGroup } from '@webshard/collectives';
import { createCpuBackend } from '@webshard/tensor-core';
import { trainRank } from './parity.js';

const run = JSON.parse(process.argv[3]!);
const group = await initProcessGroup({
  backend: process.argv[2] as 'tcp' | 'ws',
  timeoutMs: 30_000,
  group: run.group,
});
const result = await trainRank(group, createCpuBackend(), run, {});
console.log(
  `RESULT ${JSON.stringify({
    rank: group.rank,
    losses: result.losses,
    stagedOps: result.stagedOps,
    params: Object.fromEntries([...result.params].map(([k, v]) => [k, [...v]])),
  })}`,
);
await group.close();
