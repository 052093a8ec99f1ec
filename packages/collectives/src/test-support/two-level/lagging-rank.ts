// A rank of two-level-lagging-rank.test.ts: all-reduces in a two-level world where rank 1 lags.
// Op #0 counts the shm barriers an all-reduce takes on this rank. In op #1, rank 1 holds the
// return of its last barrier (every node-mate has arrived: the op is complete on every rank) until
// the transport has aborted; ranks 0 and 2 finish op #1 and say so to rank 3, which then aborts
// the world, as a rank whose own work failed does
// ([Note: an abort does not undo a finished op]). Then every rank calls a world barrier (op #2).
// Prints what ops #1 and #2 gave as `@@lag {...}`.
import { initProcessGroup } from '../../init-process-group.js';
import { errorReport } from '../../suites/suite-reference.js';
import { twoLevelOf } from '../../two-level/two-level-transport.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const group = await initProcessGroup({ timeoutMs: 30_000, group: { timeoutMs: 20_000 } });
const arena = twoLevelOf(group.transport)!.local.sharedArena;
const barrier = arena.barrier.bind(arena);
let barriers = 0;
let lagAt = -1;
let held = false;
arena.barrier = async (waiting) => {
  await barrier(waiting);
  barriers++;
  if (barriers !== lagAt) return;
  held = true;
  while (group.transport.abortReason === null) await sleep(2);
};
const input = () => Float32Array.from({ length: 8 }, (_, i) => i + group.rank);

await group.allReduce(input()).wait();
if (group.rank === 1) lagAt = 2 * barriers;
const report: Record<string, unknown> = { rank: group.rank };
const first = input();
try {
  await group.allReduce(first).wait();
  report.first = Array.from(first);
} catch (error) {
  report.firstError = errorReport(error);
}
// Ranks 0 and 2 tell rank 3 they are past op #1; then it aborts.
const note = new Float32Array(1);
if (group.rank === 0 || group.rank === 2) await group.send(note, 3).wait();
if (group.rank === 3) {
  await Promise.all([group.recv(note, 0).wait(), group.recv(new Float32Array(1), 2).wait()]);
  group.abort('rank 3 gives up after op #1');
}
try {
  await group.barrier().wait();
} catch (error) {
  report.secondError = errorReport(error);
}
report.held = held;
process.stdout.write(`@@lag ${JSON.stringify(report)}\n`);
await group.close();
