import { describe, expect, it } from 'vitest';
import { ArgumentError } from '../errors.js';
import { mul, relu, sum } from '../ops/index.js';
import { createCpuBackend } from '../runtime.js';
import { Tensor } from '../tensor.js';
import { checkpoint } from './checkpoint.js';
import { backward } from './engine.js';
import { AutogradError } from './errors.js';
import type { RunningBackward } from './running-backward.js';

const backend = createCpuBackend();

function leaf(values: number[]): Tensor {
  const t = Tensor.empty(backend, [values.length]);
  t.write(values);
  t.requiresGrad = true;
  return t;
}

describe('the running backward handed to hooks, nodes and callbacks', () => {
  it('tensor hooks, post-accumulate hooks and callbacks get the same one', async () => {
    const x = leaf([1, 2]);
    const y = sum(mul(x, x));
    const seen: RunningBackward[] = [];
    const log: string[] = [];
    y.registerHook((_grad, running) => {
      seen.push(running);
      running.queueCallback((again) => {
        seen.push(again);
        log.push('first callback');
        again.queueCallback(() => {
          log.push('queued by a callback');
        });
      });
      return undefined;
    });
    x.registerPostAccumulateGradHook((_param, running) => {
      seen.push(running);
      log.push('accumulated');
    });
    await backward(y);
    log.push('resolved');
    expect(log).toEqual(['accumulated', 'first callback', 'queued by a callback', 'resolved']);
    expect(new Set(seen).size).toBe(1);
    expect(() => seen[0]!.queueCallback(() => {})).toThrow(AutogradError);
    expect(() => seen[0]!.queueCallback(() => {})).toThrow(/that backward has finished/);
  });

  it('a checkpoint’s recomputation nests in it: callbacks queued there run at the outer end', async () => {
    const x = leaf([1, -2, 3]);
    const w = leaf([0.5, 0.5, 0.5]);
    const log: string[] = [];
    w.registerPostAccumulateGradHook((_param, running) => {
      log.push('w accumulated');
      running.queueCallback(() => {
        log.push(`callback, x.grad ${x.grad === null ? 'missing' : 'there'}`);
      });
    });
    const h = checkpoint((input: Tensor) => relu(mul(input, w)), x);
    const loss = sum(mul(h, h));
    await loss.backward();
    log.push('resolved');
    expect(log).toEqual(['w accumulated', 'callback, x.grad there', 'resolved']);
  });

  it('nestedIn takes only what the engine handed out', async () => {
    const x = leaf([1]);
    const fake: RunningBackward = { queueCallback: () => {} };
    await expect(backward(sum(x), null, { nestedIn: fake })).rejects.toThrow(ArgumentError);
  });
});
