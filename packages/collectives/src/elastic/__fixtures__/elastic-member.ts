// One member of the elastic test world, as a worker thread (elastic.test.ts): joins the
// coordinator, takes rank 0's state after every change, and trains a toy least-squares model on
// its share of a fixed global batch, one step each time the test opens the gate. It reports its
// state after every change and at the end, so the test can compare members bit for bit.
import { parentPort, workerData } from 'node:worker_threads';
import { broadcastState, type StateValue } from '../state-transfer.js';
import { joinElastic } from '../elastic-group.js';
import { elasticShare } from '../partition.js';
import { GLOBAL_BATCH, type MemberData, type MemberReport, sampleGradient } from './toy-model.js';

const data = workerData as MemberData;
const port = parentPort!;
let gate = 0;
let release: (() => void) | null = null;
port.on('message', (message: { gate?: number; freeze?: boolean }) => {
  if (message.freeze === true && data.freezeWord !== undefined) {
    // Frozen as a closed lid freezes a process: no event loop, sockets left open.
    Atomics.wait(new Int32Array(data.freezeWord), 0, 0);
    return;
  }
  if (message.gate !== undefined) gate = message.gate;
  release?.();
});
const report = (message: MemberReport) => port.postMessage(message);

const elastic = await joinElastic({
  url: data.url,
  backend: data.backend,
  timeoutMs: 20_000,
  connectTimeoutMs: 10_000,
  group: { timeoutMs: 10_000 },
  ...(data.coordinatorTimeoutMs === undefined
    ? {}
    : { coordinatorTimeoutMs: data.coordinatorTimeoutMs }),
});
let id = elastic.membership.id;
// A newcomer's own guess of the state, different on every member: the transfer must replace it.
const params = new Float32Array(data.size).map((_, j) => (id + 1) * 0.5 + j * 1e-3);
const step = new Int32Array(1);
const state = new Map<string, StateValue>([
  ['params', params],
  ['step', step],
]);

async function share(): Promise<void> {
  const { rank, epoch, worldSize, left, joined, rejoined } = elastic.membership;
  id = elastic.membership.id;
  await broadcastState(elastic.group, state);
  report({
    kind: 'state',
    id,
    epoch,
    rank,
    worldSize,
    left,
    joined,
    step: step[0]!,
    params: params.slice(),
    rejoined: rejoined === true,
  });
}

async function trainStep(): Promise<void> {
  const { rank, worldSize } = elastic.membership;
  const share = elasticShare(GLOBAL_BATCH, worldSize, rank);
  const grad = new Float32Array(data.size);
  for (let i = share.start; i < share.start + share.count; i++) {
    sampleGradient(params, step[0]!, i, grad);
  }
  if (data.blockMs !== undefined)
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, data.blockMs);
  if (data.sleepMs !== undefined) await new Promise((resolve) => setTimeout(resolve, data.sleepMs));
  await elastic.group.allReduce(grad).wait();
  for (let j = 0; j < params.length; j++) params[j]! -= (data.lr * grad[j]!) / GLOBAL_BATCH;
  step[0]! += 1;
}

try {
  await share();
  while (step[0]! < data.steps) {
    while (step[0]! >= gate) {
      report({ kind: 'gate', id, step: step[0]! });
      await new Promise<void>((resolve) => {
        release = resolve;
      });
    }
    let failed = false;
    try {
      await trainStep();
    } catch {
      failed = true;
    }
    if ((await elastic.sync({ failed })) !== null) await share();
  }
} catch (error) {
  const { code, message } = error as { code?: string; message: string };
  report({ kind: 'error', id, step: step[0]!, code: code ?? '', message });
  port.unref();
  process.exit(1);
}
report({
  kind: 'done',
  id,
  epoch: elastic.membership.epoch,
  step: step[0]!,
  params: params.slice(),
});
await elastic.close();
// The gate listener is all that keeps the thread alive now.
port.unref();
