import { describe, expect, it } from 'vitest';
import { FreedTensorError, OutOfMemoryError, SharedStorageError } from './errors.js';
import { moveTensors_ } from './move.js';
import { Linear } from './nn/layers.js';
import { matmul, mseLoss, mul, sum, tensor } from './ops/index.js';
import { AdamW } from './optim/adam.js';
import { createCpuBackend } from './runtime.js';
import { Tensor } from './tensor.js';
import { describeBackends } from './testing/index.js';

describeBackends('moveTo_ between a host and a device', (ctx) => {
  it('keeps the tensor object, name and requiresGrad; the elements arrive; memory moves', async () => {
    const host = createCpuBackend();
    const device = ctx.backend;
    const before = device.memoryStats().allocated;
    const w = tensor(
      [
        [1, 2, 3],
        [4, 5, 6],
      ],
      { backend: host },
    );
    w.name = 'fc.weight';
    w.requiresGrad = true;
    const hostBefore = host.memoryStats().allocated;
    const id = w.id;
    expect(await w.moveTo_(device)).toBe(w);
    expect(w.id).toBe(id);
    expect(w.backend).toBe(device);
    expect(w.name).toBe('fc.weight');
    expect(w.requiresGrad).toBe(true);
    expect(Array.from(await w.read())).toEqual([1, 2, 3, 4, 5, 6]);
    expect(device.memoryStats().allocated).toBeGreaterThan(before);
    expect(host.memoryStats().allocated).toBeLessThan(hostBefore);
    await w.moveTo_(host);
    expect(w.backend).toBe(host);
    expect(device.memoryStats().allocated).toBe(before);
    expect(Array.from(await w.read())).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('moves 16-bit views at odd offsets with their flat buffer, bits unchanged', async () => {
    const host = createCpuBackend();
    const device = ctx.backend;
    for (const dtype of ['f16', 'bf16'] as const) {
      const flat = Tensor.empty(host, [7], dtype).write([0.5, -1.25, 3, 7.5, -0.125, 2, 9]);
      const odd = flat.view([3], 1);
      const tail = flat.view([3], 4);
      const bits = Array.from(await flat.readRaw());
      await moveTensors_([odd, flat, tail], device);
      expect(Array.from(await flat.readRaw())).toEqual(bits);
      expect(Array.from(await odd.read())).toEqual([-1.25, 3, 7.5]);
      await moveTensors_([odd, tail, flat], host);
      expect(Array.from(await tail.read())).toEqual([-0.125, 2, 9]);
      expect(Array.from(await flat.readRaw())).toEqual(bits);
    }
  });

  it('a graph recorded on the device follows the parameter to the host and back', async () => {
    const host = createCpuBackend();
    const device = ctx.backend;
    const w = tensor(
      [
        [1, 2],
        [3, 4],
      ],
      { backend: device },
    );
    w.requiresGrad = true;
    const x = tensor(
      [
        [1, -1],
        [2, 0.5],
      ],
      { backend: device },
    );
    const loss = sum(mul(matmul(x, w), matmul(x, w)));
    // The parameter leaves the device between forward and backward, as an offloaded slice does.
    await w.moveTo_(host);
    expect(w.backend).toBe(host);
    await w.moveTo_(device);
    await loss.backward();
    // d/dW sum((xW)^2) = 2 x^T (x W)
    expect(w.grad?.backend).toBe(device);
    expect(Array.from((await w.grad?.read()) ?? [])).toEqual([10, 20, 7.5, 10]);
  });

  it('moves .grad along and keeps the optimizer state keyed by the same tensor', async () => {
    const host = createCpuBackend();
    const device = ctx.backend;
    const layer = new Linear(2, 1, { backend: host });
    const opt = new AdamW(layer.parameters(), { lr: 0.1 });
    const params = layer.parameters();
    await moveTensors_(params, device);
    const loss = mseLoss(
      layer.call(tensor([[1, 2]], { backend: device })),
      tensor([[0]], { backend: device }),
    );
    await loss.backward();
    await moveTensors_(params, host);
    for (const p of params) expect(p.grad?.backend).toBe(host);
    opt.step();
    expect([...opt.state.keys()]).toEqual(params);
    expect(layer.parameters()).toEqual(params);
  });
});

describe('moveTo_ and shared storage', () => {
  it('a view that shares storage throws SharedStorageError before anything moves', async () => {
    const host = createCpuBackend();
    const device = createCpuBackend();
    const flat = Tensor.empty(host, [6]).write([0, 1, 2, 3, 4, 5]);
    const weight = flat.view([2, 2], 0);
    weight.name = 'w';
    const error = await weight.moveTo_(device).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SharedStorageError);
    expect(error).toMatchObject({ op: 'moveTo_', tensorName: 'w', references: 2, moving: 1 });
    expect((error as Error).message).toBe(
      "[moveTo_] tensor 'w' shares its storage with 1 tensor(s) that are not moving (2 references, 1 moving): move all of them together with moveTensors_, or clone it first",
    );
    expect(weight.backend).toBe(host);
    expect(device.memoryStats().allocated).toBe(0);
  });

  it('a flat buffer moves with its views in one storage: views stay views', async () => {
    const host = createCpuBackend();
    const device = createCpuBackend();
    const flat = Tensor.empty(host, [6]).write([0, 1, 2, 3, 4, 5]);
    const weight = flat.view([2, 2], 0);
    const bias = flat.view([2], 4);
    await moveTensors_([weight, flat, bias], device);
    expect(device.memoryStats().allocations).toBe(1);
    expect(host.memoryStats().allocated).toBe(0);
    expect(weight.storage()).toBe(flat.storage());
    expect(bias.offset).toBe(4);
    bias.write([40, 50]);
    expect(Array.from(await flat.read())).toEqual([0, 1, 2, 3, 40, 50]);
  });

  it('a freed tensor throws FreedTensorError; an out-of-memory target changes nothing', async () => {
    const host = createCpuBackend();
    const device = createCpuBackend({ memoryLimit: 1024 });
    const t = Tensor.empty(host, [3]);
    t.name = 'gone';
    t.free();
    await expect(t.moveTo_(device)).rejects.toThrow(FreedTensorError);
    const big = Tensor.empty(host, [1024]).write(new Float32Array(1024).fill(2));
    await expect(big.moveTo_(device)).rejects.toThrow(OutOfMemoryError);
    expect(big.backend).toBe(host);
    expect((await big.read())[1023]).toBe(2);
  });
});
