// One rank of the tcp benchmark in its own process (torchrun's environment from index.ts). Prints
// its result as one JSON line.
import { initProcessGroup } from '@webshard/collectives';
import { runPlan, type StepPlan } from './step.js';

// argv[3]: where communication progresses ('thread', the default, or 'worker').
const progress = process.argv[3] === 'worker' ? 'worker' : 'thread';
const group = await initProcessGroup({ backend: 'tcp', timeoutMs: 120_000, progress });
const result = await runPlan(group, JSON.parse(process.argv[2]!) as StepPlan);
process.stdout.write(`@@result ${JSON.stringify(result)}\n`);
await group.close();
process.exit(0);
