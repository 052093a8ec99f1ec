// One rank of the overlap benchmark (overlap.ts) in its own process: a kernel of fixed work that
// never yields, and per path an all-reduce alone and the all-reduce issued before the kernel and
// awaited after it: on the rank's thread (`thread`), through the communication worker (`worker`),
// and through it with a buffer on shared memory (`worker-shared`). Rank 0 prints the medians as
// one JSON line.
import { WorkerGroup } from '../src/comm-worker/worker-group.js';
import { createNetworkTransport } from '../src/connect-transport.js';
import type { Work } from '../src/group/work.js';
import { ProcessGroup } from '../src/process-group.js';
import { StoreClient } from '../src/rendezvous/store-client.js';

const [threadStore, workerPort, rankText, sizeText, mibText, itersText, repsText, backendText] =
  process.argv.slice(2) as [string, string, string, string, string, string, string, string?];
const backend = backendText === 'ws' ? 'ws' : 'tcp';
const rank = Number(rankText);
const size = Number(sizeText);
const count = (Number(mibText) << 20) / 4;
const kernelIterations = Number(itersText);
const repetitions = Number(repsText);
const token = 'overlap-bench';

/** The paths compared, each its own world of 2 ranks over tcp (or ws); the same processes run them all. */
const OVERLAP_PATHS = ['thread', 'worker', 'worker-shared'] as const;
type OverlapPath = (typeof OVERLAP_PATHS)[number];

interface Ranked {
  allReduce(data: Float32Array): Work;
  barrier(): Work;
  close(): Promise<void>;
}

async function joinThread(): Promise<Ranked> {
  const store = await StoreClient.connect({
    url: threadStore,
    rank,
    worldSize: size,
    token,
    timeoutMs: 60_000,
  });
  const options = {
    rank,
    worldSize: size,
    masterAddr: '127.0.0.1',
    masterPort: 0,
    localRank: rank,
    token,
    timeoutMs: 60_000,
  };
  const transport = await createNetworkTransport(
    backend,
    { store, options, close: () => store.close() },
    { host: '127.0.0.1' },
  );
  const group = ProcessGroup.fromTransport(transport, { timeoutMs: 120_000 });
  return {
    allReduce: (d) => group.allReduce(d),
    barrier: () => group.barrier(),
    close: async () => {
      await group.close();
      await store.close();
    },
  };
}

/** Fixed work that never yields: the same instructions on every path. */
function kernel(iterations: number): number {
  let x = 0;
  for (let i = 0; i < iterations; i++) x += Math.sqrt(x + i);
  return x;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

const thread = await joinThread();
const comm = await WorkerGroup.start({
  connect: {
    backend,
    rank,
    worldSize: size,
    localRank: rank,
    masterAddr: '127.0.0.1',
    masterPort: Number(workerPort),
    token,
    timeoutMs: 120_000,
  },
  group: { timeoutMs: 120_000 },
});
const groups: Record<OverlapPath, [Ranked, Float32Array]> = {
  thread: [thread, new Float32Array(count).fill(1)],
  worker: [comm, new Float32Array(count).fill(1)],
  'worker-shared': [comm, (comm.allocate('f32', count) as Float32Array).fill(1)],
};
const kernelMs: number[] = [];
const alone = Object.fromEntries(OVERLAP_PATHS.map((p) => [p, [] as number[]])) as Record<
  OverlapPath,
  number[]
>;
const overlapped = structuredClone(alone);
const exposed = structuredClone(alone);
let sink = 0;
// Interleaved, repetition by repetition, so the load moves every path alike.
for (let rep = -1; rep < repetitions; rep++) {
  await thread.barrier().wait();
  let t0 = performance.now();
  sink += kernel(kernelIterations);
  const kernelTime = performance.now() - t0;
  if (rep >= 0) kernelMs.push(kernelTime);
  for (const path of OVERLAP_PATHS) {
    const [group, buffer] = groups[path];
    await group.barrier().wait();
    t0 = performance.now();
    await group.allReduce(buffer).wait();
    const aloneMs = performance.now() - t0;
    await group.barrier().wait();
    t0 = performance.now();
    const work = group.allReduce(buffer);
    const k0 = performance.now();
    sink += kernel(kernelIterations);
    const k1 = performance.now();
    await work.wait();
    const overlappedMs = performance.now() - t0;
    if (rep < 0) continue;
    alone[path].push(aloneMs);
    overlapped[path].push(overlappedMs);
    // The issue and the wait after the kernel, in this iteration: free of the kernel's own noise.
    exposed[path].push(overlappedMs - (k1 - k0));
  }
}
// Small messages alone, per path: what the worker's hand-off costs where there is nothing to hide.
const SMALL_BYTES = [4 << 10, 64 << 10, 1 << 20];
const small: Record<string, Record<string, number>> = {};
for (const bytes of SMALL_BYTES) {
  small[bytes] = {};
  for (const path of OVERLAP_PATHS) {
    const [group, full] = groups[path];
    const data = full.subarray(0, bytes / 4);
    const times: number[] = [];
    for (let i = -5; i < 40; i++) {
      const t0 = performance.now();
      await group.allReduce(data).wait();
      if (i >= 0) times.push(performance.now() - t0);
    }
    small[bytes]![path] = median(times);
  }
}
await thread.close();
await comm.close();
if (rank === 0) {
  const of = (table: Record<OverlapPath, number[]>) =>
    Object.fromEntries(OVERLAP_PATHS.map((p) => [p, median(table[p])]));
  const result = {
    kernel: median(kernelMs),
    alone: of(alone),
    overlapped: of(overlapped),
    exposed: of(exposed),
    small,
    sink: sink > 0,
  };
  process.stdout.write(`@@overlap ${JSON.stringify(result)}\n`);
}
process.exit(0);
