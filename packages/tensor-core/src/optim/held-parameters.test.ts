import { describe, expect, it } from 'vitest';
import { createCpuBackend } from '../runtime.js';
import { tensor } from '../ops/creation.js';
import type { Tensor } from '../tensor.js';
import { AdamW } from './adam.js';
import { holdParameter } from './optimizer.js';
import { SGD } from './sgd.js';

// [Note: parameters held elsewhere]: a holder keeps a parameter, its gradient and state out of
// memory between uses; every optimizer brings them back around each use, one parameter at a time.

/** A holder that keeps `param`'s values, gradient and state on the side, logging each call. */
function sideHolder(name: string, param: Tensor, log: string[]) {
  let saved: { values: number[]; grad: number[] } | null = null;
  holdParameter(param, {
    acquire(p, state, use) {
      log.push(`acquire ${name} ${use} ${state === undefined ? 'new' : 'state'}`);
      if (use === 'step' && saved !== null) {
        p.reallocate().write(saved.values);
        p.grad!.reallocate().write(saved.grad);
      }
    },
    afterStep(p) {
      log.push(`afterStep ${name}`);
      expect(p.isFreed).toBe(false);
    },
  });
  return {
    async putAside(): Promise<void> {
      saved = {
        values: [...((await param.read()) as Float32Array)],
        grad: [...((await param.grad!.read()) as Float32Array)],
      };
      param.free();
      param.grad!.free();
    },
  };
}

describe('holdParameter: optimizers acquire a held parameter around each use', () => {
  for (const [name, make] of [
    ['AdamW', (ps: Tensor[]) => new AdamW(ps, { lr: 0.1 })],
    ['SGD', (ps: Tensor[]) => new SGD(ps, { lr: 0.1, momentum: 0.9 })],
  ] as const) {
    it(`${name}: step acquires each parameter with a gradient before its update and after the one before it; stateDict acquires the state`, async () => {
      const backend = createCpuBackend();
      const log: string[] = [];
      const [a, b, c] = [
        [1, 2],
        [3, 4],
        [5, 6],
      ].map((v) => {
        const t = tensor(v, { backend });
        t.requiresGrad = true;
        t.grad = tensor([0.5, -0.5], { backend });
        return t;
      }) as [Tensor, Tensor, Tensor];
      c.grad = null;
      const plainA = tensor([1, 2], { backend });
      plainA.grad = tensor([0.5, -0.5], { backend });
      const reference = make([plainA]);
      reference.step();
      reference.step();

      const optimizer = make([a, b, c]);
      const held = sideHolder('a', a, log);
      sideHolder('c', c, log);
      optimizer.step();
      // A freed gradient of a held parameter is its holder's to bring back, not an error.
      await held.putAside();
      optimizer.step();
      optimizer.stateDict();
      expect(log).toEqual([
        'acquire a step new',
        'afterStep a',
        'acquire a step state',
        'afterStep a',
        'acquire a stateDict state',
      ]);
      expect(await a.read()).toEqual(await plainA.read());
      holdParameter(a, null);
      optimizer.stateDict();
      expect(log.length).toBe(5);
    });
  }
});
