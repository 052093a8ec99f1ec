// A rank of the tcp and ws parity tests, started by webshard-run: joins over the backend in
// argv[2], runs the job in argv[3] and prints its report as one JSON line.
import { initProcessGroup } from '@webshard/collectives';
import { createCpuBackend } from '@webshard/tensor-core';
import { type ParityJob, trainRank } from './parity.js';

const group = await initProcessGroup({
  backend: process.argv[2] as 'tcp' | 'ws',
  timeoutMs: 20_000,
});
const job = JSON.parse(process.argv[3]!) as ParityJob;
const report = await trainRank(group, job, createCpuBackend());
process.stdout.write(`REPORT ${JSON.stringify({ ...report, transport: group.transport.kind })}\n`);
await group.close();
