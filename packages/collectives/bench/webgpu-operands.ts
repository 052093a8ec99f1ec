// Collectives on WebGPU tensors (#13 item 9): an all-gather whose input and output live on the
// device, so each op reads the shard back, gathers on the host and writes the result to the
// device; the timing counts those host copies. The ranks are `local` (one thread, one device):
// the `webgpu` package does not work in worker threads, so `shm` cannot hold WebGPU tensors.
// The peer is the same op on CPU-backend tensors, which the group reads and writes in place.
// Alone: `tsx --conditions=@webshard/source bench/webgpu-operands.ts` prints the rows.
import { type BenchRow, formatTable, timeMedian } from '@webshard/bench';
import { type Backend, createCpuBackend, createWebGpuBackend, Tensor } from '@webshard/tensor-core';
import { createLocalGroups } from '../src/transports/local/local-transport.js';

const MiB = 1 << 20;

async function allGatherMs(backend: Backend, sizeMiB: number): Promise<number> {
  const world = 2;
  const count = (sizeMiB * MiB) / 4;
  const groups = createLocalGroups(world, { timeoutMs: 120_000 });
  const ranks = groups.map((group) => ({
    group,
    input: Tensor.empty(backend, [count / world], 'f32').write(new Float32Array(count / world)),
    output: Tensor.empty(backend, [count], 'f32'),
  }));
  const ms = await timeMedian(
    async () => {
      await Promise.all(ranks.map((r) => r.group.allGather(r.input, r.output).wait()));
      await backend.sync();
    },
    { warmup: 2, iterations: 7 },
  );
  for (const r of ranks) {
    r.input.free();
    r.output.free();
    await r.group.close();
  }
  return ms;
}

/** The rows, or none (with a message) where no WebGPU adapter exists. */
export async function webGpuOperandRows(sizesMiB: readonly number[]): Promise<BenchRow[]> {
  let gpu: Backend;
  try {
    gpu = await createWebGpuBackend();
  } catch (error) {
    console.log(`skipping the WebGPU tensor rows: ${(error as Error).message}`);
    return [];
  }
  const cpu = createCpuBackend();
  const rows: BenchRow[] = [];
  for (const sizeMiB of sizesMiB) {
    const busbw = (ms: number) => Math.round(((sizeMiB * MiB) / (ms / 1e3) / 1e6) * 0.5);
    const ours = busbw(await allGatherMs(gpu, sizeMiB));
    const peer = busbw(await allGatherMs(cpu, sizeMiB));
    rows.push({
      name: `allGather webgpu tensors (host copies counted) local 2 ranks ${sizeMiB} MiB`,
      metric: 'busbw',
      value: ours,
      unit: 'MB/s',
      peer: 'cpu tensors, in place',
      peerValue: peer,
    });
  }
  gpu.dispose();
  cpu.dispose();
  return rows;
}

if (process.argv[1]?.endsWith('webgpu-operands.ts')) {
  console.log(formatTable(await webGpuOperandRows([16, 64])));
  process.exit(0);
}
