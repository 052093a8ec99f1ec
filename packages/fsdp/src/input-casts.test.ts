// The root's input casts (fairscale's `cast_floats_to_right_precision` / `apply_to_tensors`):
// transcribed from test_fsdp_memory.py (memory back to where it was after each step) and
// test_fsdp_input.py (list and dict inputs under mixed precision), at 2 and 4 local ranks, against
// one process without FSDP.
import {
  AdamW,
  type Backend,
  cast,
  createCpuBackend,
  Linear,
  MixedPrecision,
  Module,
  mean,
  noGrad,
  RandomGenerator,
  SGD,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { FullyShardedDataParallel } from './fully-sharded.js';
import { describe, expect, it } from 'vitest';
import type { FsdpOptions } from './api.js';
import { makeBatches, Net, SMALL, slice } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

function expectClose(actual: number, expected: number, rtol = 1e-3): void {
  expect(Math.abs(actual - expected)).toBeLessThanOrEqual(rtol * Math.max(1, Math.abs(expected)));
}

/** Single-process loss of the whole batch under tensor-core's MixedPrecision (no FSDP). */
async function referenceLoss(batch: { x: number[][]; y: number[][] }): Promise<number> {
  const backend = createCpuBackend();
  const net = new Net(SMALL, backend, 0);
  const mp = new MixedPrecision(net, { computeDType: 'f16' });
  const [x, y] = slice(backend, batch, 0, batch.x.length);
  const loss = await noGrad(() => net.call(cast(x, mp.computeDType), cast(y, mp.computeDType)));
  return loss.item();
}

const CASES: [string, Omit<FsdpOptions, 'group'>, 'f32' | 'f16'][] = [
  ['mixedPrecision, f32 inputs', { mixedPrecision: true }, 'f32'],
  ['forceInputToFp32, f16 inputs', { forceInputToFp32: true }, 'f16'],
];

describe('input casts are freed after the forward (test_fsdp_memory)', () => {
  for (const [title, options, inputDtype] of CASES) {
    for (const world of [2, 4]) {
      it(`${title}: three noGrad forwards and three steps leave nothing behind, world ${world}`, async () => {
        const batch = makeBatches(createCpuBackend(), SMALL, 1, 8)[0]!;
        const reference = options.mixedPrecision ? await referenceLoss(batch) : null;
        const rows = 8 / world;
        const results = await onLocalRanks(world, async (group, backend: Backend) => {
          const model = wrapNet(new Net(SMALL, backend, 0), group, options, true);
          const [x32, y32] = slice(backend, batch, group.rank * rows, (group.rank + 1) * rows);
          const [x, y] = [cast(x32, inputDtype), cast(y32, inputDtype)];
          const evalAllocated: number[] = [];
          const losses: number[] = [];
          for (let i = 0; i < 3; i++) {
            const loss = await noGrad(() => model.call(x, y));
            losses.push(await loss.item());
            loss.free();
            evalAllocated.push(backend.memoryStats().allocated);
          }
          const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
          const stepAllocated: number[] = [];
          for (let i = 0; i < 3; i++) {
            const loss = await model.call(x, y);
            await loss.backward();
            loss.free();
            optimizer.step();
            optimizer.zeroGrad();
            stepAllocated.push(backend.memoryStats().allocated);
          }
          return { evalAllocated, stepAllocated, losses };
        });
        for (const r of results) {
          expect(r.evalAllocated[1]).toBe(r.evalAllocated[0]);
          expect(r.evalAllocated[2]).toBe(r.evalAllocated[0]);
          // The first step makes AdamW's moments; later steps allocate nothing that stays.
          expect(r.stepAllocated[2]).toBe(r.stepAllocated[1]);
        }
        if (reference !== null) {
          const mean = results.reduce((s, r) => s + r.losses[0]!, 0) / world;
          expectClose(mean, reference);
        }
      });
    }
  }
});

/** fairscale's test model: one Linear(4, 4), its input inside a list, a dict or deeper. */
class Nested extends Module<[unknown], Tensor> {
  readonly layer: Linear;
  constructor(
    backend: Backend,
    private readonly pick: (input: unknown) => Tensor,
  ) {
    super();
    this.layer = this.registerModule(
      'layer',
      new Linear(4, 4, { backend, generator: new RandomGenerator(3) }),
    );
  }
  forward(input: unknown): Tensor {
    return this.layer.call(this.pick(input));
  }
}

const INPUTS: [string, (x: Tensor) => unknown, (input: unknown) => Tensor][] = [
  ['a list', (x) => [x], (i) => (i as Tensor[])[0]!],
  ['a dict', (x) => ({ in: x }), (i) => (i as { in: Tensor }).in],
  [
    'a map in a list in a dict',
    (x) => ({ a: [new Map([['x', x]])] }),
    (i) => (i as { a: Map<string, Tensor>[] }).a[0]!.get('x')!,
  ],
];

const ROWS = 16;
const STEPS = 5;

function inputRows(): number[][] {
  let state = 7;
  return Array.from({ length: ROWS }, () =>
    Array.from({ length: 4 }, () => {
      state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
      return state / 2 ** 32;
    }),
  );
}

/** Five SGD steps on mean(layer(x)) over `rows` (x requires grad, as in fairscale's test). */
async function trainNested(
  model: { call(input: unknown): Tensor | Promise<Tensor> },
  params: Tensor[],
  backend: Backend,
  wrap: (x: Tensor) => unknown,
  rows: number[][],
  mp: MixedPrecision | null,
): Promise<void> {
  const optimizer = new SGD(params, { lr: 0.1 });
  for (let i = 0; i < STEPS; i++) {
    const x32 = tensor(rows, { backend });
    const x = mp === null ? x32 : cast(x32, mp.computeDType);
    x.requiresGrad = true;
    const out = await model.call(wrap(x));
    const loss = mean(out);
    await loss.backward();
    mp?.gradsToMasters();
    optimizer.step();
    optimizer.zeroGrad();
    mp?.mastersToCompute();
    for (const t of new Set([x32, x, out, loss])) t.free();
  }
}

describe('tensors inside nested inputs are cast under mixed precision (test_fsdp_input)', () => {
  const rows = inputRows();
  for (const [title, wrap, pick] of INPUTS) {
    for (const world of [2, 4]) {
      it(`${title}, world ${world}`, async () => {
        const backend = createCpuBackend();
        const net = new Nested(backend, pick);
        const mp = new MixedPrecision(net, { computeDType: 'f16' });
        await trainNested(net, mp.masterParams(), backend, wrap, rows, mp);
        const reference = await Promise.all(
          mp.masterParams().map(async (p) => (await p.read()) as Float32Array),
        );
        const per = ROWS / world;
        const results = await onLocalRanks(world, async (group, b) => {
          const model = new FullyShardedDataParallel(new Nested(b, pick), {
            group,
            mixedPrecision: true,
          });
          const mine = rows.slice(group.rank * per, (group.rank + 1) * per);
          await trainNested(model, model.parameters(), b, wrap, mine, null);
          model.assertState('after training', ['IDLE']);
          const out: Float32Array[] = [];
          await model.summonFullParams(async () => {
            for (const [, p] of model.namedParameters()) out.push((await p.read()) as Float32Array);
          });
          return out;
        });
        for (const r of results) {
          r.forEach((values, i) => {
            const expected = reference[i]!;
            for (let j = 0; j < expected.length; j++) {
              expect(Math.abs(values[j]! - expected[j]!)).toBeLessThanOrEqual(2e-3);
            }
          });
        }
      });
    }
  }
});
