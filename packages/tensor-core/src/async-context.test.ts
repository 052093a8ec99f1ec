import { describe, expect, it } from 'vitest';
import { backward } from './autograd/engine.js';
import { isBackwardRunning, queueCallback } from './autograd/running-backward.js';
import { AutogradError } from './autograd/errors.js';
import { isGradEnabled, noGrad, setGradEnabled } from './autograd/grad-mode.js';
import { asyncContextSupported, ContextSlot } from './async-context.js';
import { Linear, ReLU } from './nn/layers.js';
import { Sequential } from './nn/containers.js';
import { Module } from './nn/module.js';
import { mul, sum } from './ops/index.js';
import { createCpuBackend } from './runtime.js';
import { tidyAsync } from './scope.js';
import { Tensor } from './tensor.js';

const tick = () => new Promise<void>((resolve) => setTimeout(resolve, 1));

function leaf(values: number[]): Tensor {
  const backend = createCpuBackend();
  const t = Tensor.empty(backend, [values.length]);
  t.write(values);
  t.requiresGrad = true;
  return t;
}

describe('async context', () => {
  it('is supported in Node', () => {
    expect(asyncContextSupported).toBe(true);
  });

  it('a slot keeps each chain’s value across awaits', async () => {
    const slot = new ContextSlot('none');
    const seen: string[] = [];
    await Promise.all(
      ['a', 'b'].map((v) =>
        slot.run(v, async () => {
          await tick();
          seen.push(`${v}=${slot.get()}`);
        }),
      ),
    );
    expect(seen.sort()).toEqual(['a=a', 'b=b']);
    expect(slot.get()).toBe('none');
  });
});

describe('end-of-backward callbacks, several backwards in one thread', () => {
  it('each callback runs once, at the end of the backward whose hook queued it', async () => {
    const log: string[] = [];
    const run = async (name: string, delay: number) => {
      const x = leaf([1, 2, 3]);
      const y = sum(mul(x, x));
      x.registerPostAccumulateGradHook(async () => {
        await new Promise((r) => setTimeout(r, delay));
        queueCallback(() => {
          log.push(`${name} callback, grad ${x.grad === null ? 'missing' : 'there'}`);
        });
      });
      await backward(y);
      log.push(`${name} done`);
    };
    await Promise.all([run('rank0', 20), run('rank1', 1), run('rank2', 10), run('rank3', 5)]);
    for (const rank of ['rank0', 'rank1', 'rank2', 'rank3']) {
      const i = log.indexOf(`${rank} callback, grad there`);
      expect(i).toBeGreaterThanOrEqual(0);
      expect(log.indexOf(`${rank} done`)).toBe(i + 1);
      expect(log.filter((l) => l.startsWith(`${rank} callback`))).toHaveLength(1);
    }
  });

  it('queueing outside this chain’s backward is an AutogradError, even while another runs', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const x = leaf([1]);
    const y = sum(mul(x, x));
    x.registerPostAccumulateGradHook(() => gate);
    const running = backward(y);
    await tick();
    expect(isBackwardRunning()).toBe(false);
    expect(() => queueCallback(() => {})).toThrow(AutogradError);
    expect(() => queueCallback(() => {})).toThrow(
      /callbacks can only be queued while backward runs/,
    );
    release();
    await running;
  });
});

describe('grad mode per call chain', () => {
  it('an async noGrad in one chain does not stop another chain from recording', async () => {
    const results = await Promise.all([
      noGrad(async () => {
        await tick();
        await tick();
        return isGradEnabled();
      }),
      (async () => {
        await tick();
        const x = leaf([1, 2]);
        const y = mul(x, x);
        await tick();
        return y.requiresGrad && isGradEnabled();
      })(),
    ]);
    expect(results).toEqual([false, true]);
    expect(isGradEnabled()).toBe(true);
  });

  it('setGradEnabled holds for synchronous code and noGrad / enableGrad apply inside it', () => {
    const previous = setGradEnabled(false);
    expect(isGradEnabled()).toBe(false);
    setGradEnabled(previous);
    expect(isGradEnabled()).toBe(true);
  });
});

describe('async forward', () => {
  class AsyncLayer extends Module<[Tensor], Promise<Tensor>> {
    readonly inner: Linear;
    constructor(backend: ReturnType<typeof createCpuBackend>) {
      super();
      this.inner = this.registerModule('inner', new Linear(3, 3, { backend }));
    }
    async forward(x: Tensor): Promise<Tensor> {
      await tick();
      return this.inner.call(x);
    }
  }

  it('a Sequential with an async child returns a promise and frees its intermediates', async () => {
    const backend = createCpuBackend();
    const model = new Sequential(
      new Linear(3, 3, { backend }),
      new AsyncLayer(backend) as unknown as Module<[Tensor], Tensor>,
      new ReLU(),
    );
    const x = Tensor.empty(backend, [2, 3]);
    x.write([1, 2, 3, 4, 5, 6]);
    const before = backend.memoryStats().allocations;
    // Under noGrad nothing is saved for backward, so only the output stays.
    const y = await noGrad(() => model.callAsync(x));
    expect(y.shape).toEqual([2, 3]);
    expect(backend.memoryStats().allocations).toBe(before + 1);
  });

  it('tidyAsync frees what its chain made across awaits, not what another chain made', async () => {
    const backend = createCpuBackend();
    let other: Tensor | null = null;
    const [kept] = await Promise.all([
      tidyAsync(async () => {
        const a = Tensor.empty(backend, [4]);
        await tick();
        const b = Tensor.empty(backend, [4]);
        await tick();
        void a;
        return b;
      }),
      (async () => {
        await tick();
        other = Tensor.empty(backend, [4]);
      })(),
    ]);
    expect(kept.isFreed).toBe(false);
    expect(other!.isFreed).toBe(false);
    expect(backend.memoryStats().allocations).toBe(2);
  });
});
