// One rank of the FSDP benchmark over tcp, in its own process (started by tcp-launch.ts with
// torchrun's environment): argv[2] the job, argv[3] where communication progresses ('thread' or
// 'worker'). Prints its result as one JSON line.
import { initProcessGroup } from '@webshard/collectives';
import { runStepJob, type StepJob } from './step-job.js';

const progress = process.argv[3] === 'worker' ? 'worker' : 'thread';
const group = await initProcessGroup({ backend: 'tcp', timeoutMs: 120_000, progress });
const result = await runStepJob(group, JSON.parse(process.argv[2]!) as StepJob);
process.stdout.write(`@@result ${JSON.stringify(result)}\n`);
await group.close();
process.exit(0);
