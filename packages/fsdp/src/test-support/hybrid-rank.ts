// A rank started by webshard-run on one of several simulated nodes (threads of one node share
// memory; nodes talk over the transport in argv[2]): trains the parity run with the sharding
// strategy in argv[3]'s options (HYBRID_SHARD's node size from LOCAL_WORLD_SIZE) and prints its
// result as one JSON line.
import { initProcessGroup } from '@webshard/collectives';
import { createCpuBackend } from '@webshard/tensor-core';
import { trainRank } from './parity.js';

const { run, options } = JSON.parse(process.argv[3]!);
const group = await initProcessGroup({
  backend: process.argv[2] as 'tcp' | 'ws',
  timeoutMs: 30_000,
});
const result = await trainRank(group, createCpuBackend(), run, options);
console.log(
  `RESULT ${JSON.stringify({
    rank: group.rank,
    kind: group.transport.kind,
    losses: result.losses,
    params: Object.fromEntries([...result.params].map(([k, v]) => [k, [...v]])),
  })}`,
);
await group.close();
