import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Linear } from '../nn/layers.js';
import { Module } from '../nn/module.js';
import { gelu, sum, tensor } from '../ops/index.js';
import { RandomGenerator } from '../random/generator.js';
import { createCpuBackend, setDefaultBackend } from '../runtime.js';
import { Tensor } from '../tensor.js';
import { checkpoint } from './checkpoint.js';
import { queueCallback } from './running-backward.js';

/**
 * The hook protocol of fairscale's FullyShardedDataParallel, driven through this package's hooks
 * (a one-rank stand-in: "all-gather" copies the kept shard into a fresh full buffer, after an
 * await): rebuild the parameters in a forward pre-hook, free them after forward, rebuild them again
 * in a pre-backward hook on the outputs, collect each gradient in a post-accumulate hook, free
 * again, and finish in a queued callback. The gradients must equal those of the plain model.
 */
const backend = createCpuBackend();
beforeAll(() => setDefaultBackend(backend));
afterAll(() => setDefaultBackend(undefined));

const tick = () => new Promise<void>((r) => setTimeout(r, 1));

class Mlp extends Module<[Tensor], Tensor> {
  readonly fc1 = this.registerModule(
    'fc1',
    new Linear(3, 4, { generator: new RandomGenerator(1) }),
  );
  readonly fc2 = this.registerModule(
    'fc2',
    new Linear(4, 2, { generator: new RandomGenerator(2) }),
  );
  forward(x: Tensor): Tensor {
    return this.fc2.call(gelu(this.fc1.call(x)));
  }
}

/** Shard a unit's parameters into one flat buffer; free them outside forward and backward. */
async function shard(unit: Module, events: string[]): Promise<Map<Tensor, number[]>> {
  const params = unit.parameters();
  const kept = new Map<Tensor, Float32Array>();
  for (const p of params) kept.set(p, (await p.read()) as Float32Array);
  const reduced = new Map<Tensor, number[]>();
  const unshard = async (why: string) => {
    await tick();
    const total = params.reduce((n, p) => n + p.size, 0);
    const full = Tensor.empty(backend, [total]);
    let offset = 0;
    for (const p of params) {
      full.view([p.size], offset).write(kept.get(p)!);
      p.setData(full.view(p.shape, offset));
      offset += p.size;
    }
    full.free();
    events.push(why);
  };
  const reshard = () => {
    for (const p of params) p.free();
  };
  let pending = params.length;
  for (const p of params) {
    p.registerPostAccumulateGradHook(async (param) => {
      await tick();
      reduced.set(param, [...(await param.grad!.read())]);
      if (--pending === 0) {
        reshard();
        events.push('post-backward reshard');
        queueCallback(() => {
          events.push('final callback');
        });
      }
    });
  }
  unit.registerForwardPreHook(async () => {
    await unshard('pre-forward unshard');
    return undefined;
  });
  unit.registerForwardHook((_m, _args, output) => {
    reshard();
    // As fairscale: only a forward that records a graph gets a pre-backward hook (a checkpointed
    // forward runs under noGrad; its recomputation in backward registers it).
    const out = output as Tensor;
    if (out.requiresGrad) {
      out.registerHook(async () => {
        await unshard('pre-backward unshard');
        return undefined;
      });
    }
    return undefined;
  });
  reshard();
  return reduced;
}

describe('an FSDP-style unit driven by module, tensor and post-accumulate hooks', () => {
  for (const useCheckpoint of [false, true]) {
    it(`gives the plain model's gradients${useCheckpoint ? ' under activation checkpointing' : ''}`, async () => {
      const x = tensor([0.5, -1, 2, 1, 0.25, -0.5], { shape: [2, 3] });
      const plain = new Mlp();
      await sum(plain.call(x)).backward();
      const expected = await Promise.all(
        plain.parameters().map(async (p) => [...(await p.grad!.read())]),
      );

      const model = new Mlp();
      model.nameTensors();
      const events: string[] = [];
      const reduced = await shard(model, events);
      const out = useCheckpoint
        ? await checkpoint(async (h: Tensor) => await model.callAsync(h), x)
        : await model.callAsync(x);
      expect(model.fc1.weight.isFreed).toBe(true);
      await sum(out).backward();
      expect(model.parameters().map((p) => reduced.get(p))).toEqual(expected);
      expect(model.fc1.weight.isFreed).toBe(true);
      expect(events).toEqual([
        'pre-forward unshard',
        ...(useCheckpoint ? ['pre-forward unshard'] : ['pre-backward unshard']),
        ...(useCheckpoint ? ['pre-backward unshard'] : []),
        'post-backward reshard',
        'final callback',
      ]);
    });
  }
});
