// The engine where there is no AsyncLocalStorage, as in a browser: the test hides
// `node:async_hooks` before tensor-core loads (vitest runs each file in a fresh module graph).
// See [Note: the running backward].
import { vi } from 'vitest';

vi.hoisted(() => {
  const proc = process as { getBuiltinModule?: (id: string) => unknown };
  const original = proc.getBuiltinModule?.bind(process);
  proc.getBuiltinModule = (id: string) =>
    id === 'node:async_hooks' || id === 'async_hooks' ? undefined : original?.(id);
});

import { describe, expect, it } from 'vitest';
import { asyncContextSupported, ContextSlot } from '../async-context.js';
import { mul, relu, sum } from '../ops/index.js';
import { createCpuBackend } from '../runtime.js';
import { Tensor } from '../tensor.js';
import { checkpoint } from './checkpoint.js';
import { backward } from './engine.js';
import { AutogradError } from './errors.js';
import { isBackwardRunning, queueCallback } from './running-backward.js';

const tick = (ms = 1) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const backend = createCpuBackend();

function leaf(values: number[]): Tensor {
  const t = Tensor.empty(backend, [values.length]);
  t.write(values);
  t.requiresGrad = true;
  return t;
}

describe('backward without AsyncLocalStorage (a browser)', () => {
  it('runs without async context here', () => {
    expect(asyncContextSupported).toBe(false);
  });

  it('interleaved backwards each run their own callbacks, also from a checkpoint', async () => {
    const log: string[] = [];
    const rank = async (name: string, delay: number) => {
      const x = leaf([1, 2, 3]);
      const w = leaf([1, 1, 1]);
      const h = checkpoint((input: Tensor) => relu(mul(input, w)), x);
      const y = sum(mul(h, h));
      w.registerPostAccumulateGradHook(async (_param, running) => {
        await tick(delay);
        running.queueCallback(async () => {
          await tick(delay);
          log.push(`${name} callback, x.grad ${x.grad === null ? 'missing' : 'there'}`);
        });
      });
      await backward(y);
      log.push(`${name} done`);
    };
    await Promise.all([rank('rank0', 20), rank('rank1', 1), rank('rank2', 10)]);
    for (const name of ['rank0', 'rank1', 'rank2']) {
      const i = log.indexOf(`${name} callback, x.grad there`);
      expect(i, log.join('; ')).toBeGreaterThanOrEqual(0);
      expect(log.indexOf(`${name} done`)).toBe(i + 1);
    }
    expect(isBackwardRunning()).toBe(false);
  });

  it('the ambient queueCallback works with one backward and refuses to guess between two', async () => {
    const errors: string[] = [];
    const log: string[] = [];
    const x = leaf([1]);
    x.registerPostAccumulateGradHook(() => {
      queueCallback(() => {
        log.push('ambient callback');
      });
    });
    await backward(sum(mul(x, x)));
    expect(log).toEqual(['ambient callback']);

    let entered = 0;
    let bothIn!: () => void;
    const both = new Promise<void>((resolve) => {
      bothIn = resolve;
    });
    const run = async () => {
      const z = leaf([2]);
      z.registerPostAccumulateGradHook(async () => {
        if (++entered === 2) bothIn();
        await both;
        try {
          queueCallback(() => {});
        } catch (error) {
          errors.push((error as Error).message);
          expect(error).toBeInstanceOf(AutogradError);
        }
      });
      await backward(sum(mul(z, z)));
    };
    await Promise.all([run(), run()]);
    expect(errors).toHaveLength(2);
    expect(errors[0]).toMatch(/2 backward passes run in this thread/);
  });
});

describe('a context slot without AsyncLocalStorage', () => {
  it('is back to its initial value after overlapping runs end out of order', async () => {
    const slot = new ContextSlot('initial');
    let releaseFirst!: () => void;
    const first = slot.run(
      'first',
      () =>
        new Promise<void>((resolve) => {
          releaseFirst = resolve;
        }),
    );
    const second = slot.run('second', () => tick(5));
    expect(slot.get()).toBe('second');
    releaseFirst();
    await first;
    expect(slot.get()).toBe('second');
    await second;
    expect(slot.get()).toBe('initial');
  });
});
