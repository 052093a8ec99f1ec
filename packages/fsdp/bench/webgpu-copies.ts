// What an FSDP step copies between host and device on WebGPU: 2 ranks in this process (worker
// threads get no WebGPU adapter from the `webgpu` package here), the GPT of the benchmark with
// shards on the host (`moveParamsToCpu`) and compute on one WebGPU device per rank.
import { createLocalGroups } from '@webshard/collectives';
import {
  AdamW,
  type Backend,
  createCpuBackend,
  createWebGpuBackend,
  GPTBlock,
  type HostArray,
  NoAdapterError,
  type Tensor,
} from '@webshard/tensor-core';
import type { KernelTensor } from '@webshard/tensor-core/backend';
import { autoWrap, moduleClassAutoWrapPolicy } from '../src/index.js';
import { Gpt, type GptConfig, tokenBatches, tokenSlice } from '../src/test-support/gpt.js';

export interface CopyCounts {
  /** Bytes written to the device per step and rank (median over the timed steps). */
  readonly hostToDevice: number;
  /** Bytes read back from the device per step and rank. */
  readonly deviceToHost: number;
  /** The flat parameters' full size in the compute dtype (f32 here). */
  readonly fullBytes: number;
  readonly stepMs: number;
}

function count(backend: Backend, totals: { up: number; down: number }): void {
  const write = backend.write.bind(backend);
  const read = backend.read.bind(backend);
  backend.write = (dst, data, done) => {
    totals.up += data.byteLength;
    write(dst, data, done);
  };
  backend.read = async <T extends HostArray>(src: KernelTensor, into?: T): Promise<T> => {
    const out = await read(src, into);
    totals.down += out.byteLength;
    return out;
  };
}

/** The copies of an FSDP step on WebGPU, or null where there is no adapter. */
export async function webgpuCopies(
  config: GptConfig,
  rows: number,
  steps: number,
): Promise<CopyCounts | null> {
  let devices: Backend[];
  try {
    devices = [await createWebGpuBackend(), await createWebGpuBackend()];
  } catch (error) {
    if (NoAdapterError.isInstance(error)) return null;
    throw error;
  }
  const groups = createLocalGroups(2, { timeoutMs: 120_000 });
  try {
    const results = await Promise.all(
      groups.map(async (group) => {
        const device = devices[group.rank]!;
        const host = createCpuBackend();
        const model = autoWrap(new Gpt(config, host), moduleClassAutoWrapPolicy([GPTBlock]), {
          group,
          moveParamsToCpu: true,
          computeBackend: device,
        });
        const optimizer = new AdamW(model.parameters(), { lr: 1e-3 });
        const totals = { up: 0, down: 0 };
        count(device, totals);
        const ups: number[] = [];
        const downs: number[] = [];
        const times: number[] = [];
        for (const batch of tokenBatches(config, steps, 2 * rows)) {
          const [x, y] = tokenSlice(device, batch, group.rank * rows, (group.rank + 1) * rows);
          totals.up = 0;
          totals.down = 0;
          const t0 = performance.now();
          const loss = (await model.call(x, y)) as Tensor;
          await loss.backward();
          optimizer.step();
          optimizer.zeroGrad();
          await device.sync();
          times.push(performance.now() - t0);
          // The batch itself is not the step's copying.
          ups.push(totals.up - x.size * 4 - y.size * 4);
          downs.push(totals.down);
        }
        const fullBytes = model
          .units()
          .reduce((n, u) => n + u.flatParameters.reduce((m, f) => m + 4 * f.paddedNumel, 0), 0);
        const median = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1]!;
        return {
          hostToDevice: median(ups.slice(1)),
          deviceToHost: median(downs.slice(1)),
          fullBytes,
          stepMs: median(times.slice(1)),
        };
      }),
    );
    return results[0]!;
  } finally {
    await Promise.all(groups.map((g) => g.close()));
    for (const d of devices) d.dispose();
  }
}
