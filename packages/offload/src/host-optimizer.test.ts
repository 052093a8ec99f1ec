import { AdamW, createCpuBackend, type Tensor, tensor } from '@webshard/tensor-core';
import { describeBackends } from '@webshard/tensor-core/testing';
import { expect, it } from 'vitest';

// OffloadModel steps the optimizer on the host by default: the CPU backend's AdamW must give the
// device's bits on the same inputs, or offloaded training would drift from training on the device.
describeBackends('AdamW on the host against the device', (ctx) => {
  // On WebGPU (SwiftShader) the WGSL adam kernel differs from the CPU one in the last bits today
  // (a tensor-core kernel matter, reported): `it.fails` keeps that visible until it is fixed.
  const bitIdentical = ctx.kind === 'cpu' ? it : it.fails;
  bitIdentical('is bit-identical over three steps', async () => {
    const n = 4099;
    const values = Array.from({ length: n }, (_, i) => Math.sin(i * 0.7) * 0.5);
    const grads = [0, 1, 2].map((s) =>
      Array.from({ length: n }, (_, i) => Math.cos(i * 1.3 + s) * 10 ** ((i % 9) - 6)),
    );
    const run = async (backend: typeof ctx.backend): Promise<Float32Array> => {
      const p: Tensor = tensor(values, { backend });
      p.requiresGrad = true;
      const opt = new AdamW([p], { lr: 0.01, weightDecay: 0.1 });
      for (const g of grads) {
        p.grad?.free();
        p.grad = tensor(g, { backend });
        opt.step();
      }
      return (await p.read()) as Float32Array;
    };
    const host = await run(createCpuBackend());
    const device = await run(ctx.backend);
    expect(new Uint32Array(device.buffer)).toEqual(new Uint32Array(host.buffer));
  });
});
