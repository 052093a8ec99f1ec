/**
 * The offload benchmark: one training step (forward, backward, AdamW) of a 16-layer MLP, plain on
 * the device against OffloadModel at several slice counts, as tokens/s (a token is a row of the
 * batch) and peak device memory (the caching allocator's `peakAllocated`). On the CPU backend as
 * the device always, and on WebGPU where an adapter exists. Run:
 * `pnpm --filter @webshard/offload bench`.
 */
import { type BenchRow, timeMedian, writeBenchResults } from '@webshard/bench';
import {
  AdamW,
  type Backend,
  createCpuBackend,
  createWebGpuBackend,
  RandomGenerator,
  Linear,
  mseLoss,
  NoAdapterError,
  ReLU,
  Sequential,
  tensor,
} from '@webshard/tensor-core';
import { OffloadModel } from '../src/index.js';

const LAYERS = 16;
const WIDTH = 256;
const BATCH = 64;
const SLICES = [2, 4, 8, 16];

function makeModel(backend: Backend): Sequential {
  const generator = new RandomGenerator(1);
  const layers = [];
  for (let i = 0; i < LAYERS; i++) {
    layers.push(new Linear(WIDTH, WIDTH, { backend, generator }));
    if (i + 1 < LAYERS) layers.push(new ReLU());
  }
  return new Sequential(...layers);
}

function batch(backend: Backend) {
  const x = tensor(
    Array.from({ length: BATCH * WIDTH }, (_, i) => Math.sin(i)),
    { backend, shape: [BATCH, WIDTH] },
  );
  const y = tensor(new Array(BATCH * WIDTH).fill(0), { backend, shape: [BATCH, WIDTH] });
  return { x, y };
}

async function measure(
  name: string,
  device: Backend,
  step: () => Promise<void>,
  rows: BenchRow[],
  plainMs?: number,
): Promise<number> {
  await step();
  // The peak above what was allocated before (the batch), so configurations sharing one backend
  // do not see each other's leftovers.
  device.resetPeakMemoryStats();
  const base = device.memoryStats().allocated;
  const ms = await timeMedian(step, { warmup: 1, iterations: 5, maxMs: 60_000 });
  const peak = device.memoryStats().peakAllocated - base;
  rows.push({
    name,
    metric: 'tokens/s',
    value: (BATCH * 1000) / ms,
    unit: 'rows/s',
    ...(plainMs === undefined
      ? {}
      : { peer: 'plain training', peerValue: (BATCH * 1000) / plainMs }),
  });
  rows.push({ name, metric: 'peak device memory', value: peak / 2 ** 20, unit: 'MiB' });
  return ms;
}

async function runOn(
  kind: string,
  newDevice: () => Promise<Backend>,
  rows: BenchRow[],
): Promise<void> {
  // A fresh device per configuration, so each peak is that configuration's alone.
  const devices: Backend[] = [];
  const fresh = async () => {
    const d = await newDevice();
    devices.push(d);
    return d;
  };
  let device = await fresh();
  const plain = makeModel(device);
  const plainOpt = new AdamW(plain.parameters(), { lr: 1e-3 });
  let data = batch(device);
  const plainMs = await measure(
    `${kind} plain`,
    device,
    async () => {
      const loss = mseLoss(plain.call(data.x), data.y);
      await loss.backward();
      loss.free();
      plainOpt.step();
      plain.zeroGrad();
      await device.sync();
    },
    rows,
  );
  const configs = [
    ...SLICES.map((numSlices) => ({ numSlices, checkpointActivation: false, prefetch: true })),
    ...SLICES.map((numSlices) => ({ numSlices, checkpointActivation: true, prefetch: true })),
    // The overlap: the same 1/8-of-the-model configuration without prefetching.
    { numSlices: 16, checkpointActivation: false, prefetch: false },
  ];
  for (const { numSlices, checkpointActivation, prefetch } of configs) {
    device = await fresh();
    data = batch(device);
    const host = createCpuBackend();
    const model = new OffloadModel(makeModel(host), {
      device,
      offloadDevice: host,
      numSlices,
      checkpointActivation,
      prefetch,
    });
    const opt = new AdamW(model.parameters(), { lr: 1e-3 });
    await measure(
      `${kind} offload ${numSlices} slices${checkpointActivation ? ', checkpointing' : ''}${prefetch ? '' : ', no prefetch'}`,
      device,
      async () => {
        const loss = mseLoss(await model.forward(data.x), data.y);
        await loss.backward();
        loss.free();
        await model.step(opt);
        for (const p of model.parameters()) {
          p.grad?.free();
          p.grad = null;
        }
        await device.sync();
      },
      rows,
      plainMs,
    );
  }
}

const rows: BenchRow[] = [];
await runOn('cpu', async () => createCpuBackend(), rows);
try {
  console.log(`webgpu adapter: ${(await createWebGpuBackend()).description}`);
  await runOn('webgpu', () => createWebGpuBackend(), rows);
} catch (error) {
  if (!NoAdapterError.isInstance(error)) throw error;
  console.log(`skipping the WebGPU rows: ${(error as Error).message}`);
}
writeBenchResults('offload', rows);
