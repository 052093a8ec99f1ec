// A rank of two-level-node-loss.test.ts: joins the two-level world, says it is ready, then runs
// all-reduces until one fails (its node or another is killed) and prints that error as JSON with
// the wall-clock time it arrived.
import { CollectiveError } from '../../errors.js';
import { initProcessGroup } from '../../init-process-group.js';

const group = await initProcessGroup({ timeoutMs: 30_000, group: { timeoutMs: 20_000 } });
await group.allReduce(new Float32Array(1024)).wait();
console.log('ready');
const data = new Float32Array(1 << 16);
try {
  for (;;) await group.allReduce(data).wait();
} catch (error) {
  const e = error as CollectiveError;
  const fields = CollectiveError.isInstance(error) ? { peer: e.peer } : {};
  console.log(
    `@@error ${JSON.stringify({ name: e.name, message: e.message, at: Date.now(), ...fields })}`,
  );
}
await group.close();
