// Freezing after wrapping: `requiresGrad = false` on a unit's parameters() (its shards, fairscale's
// way) stops that unit training, and no gradient is written for it. Transcribed from fairscale's
// test_fsdp_freezing_weights.py (freeze_after_wrap_fsdp with the nested trunk: the trunk's
// parameters frozen through the wrapped trunk; and the root's own leftover weights frozen), three
// steps against one process with the same weights frozen, at 2 and 4 local ranks.
import { AdamW, createCpuBackend, type Tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import type { FullyShardedDataParallel } from './fully-sharded.js';
import { makeBatches, Net, SMALL, slice } from './test-support/models.js';
import { wrapNet } from './test-support/parity.js';
import { onLocalRanks } from './test-support/ranks.js';

const STEPS = 3;
const BATCH = 8;

type Part = 'trunk' | 'root';

/** The parameters each case freezes: the blocks (every nested unit) or the root's own. */
function frozenNames(part: Part, name: string): boolean {
  return part === 'trunk' ? name.startsWith('blocks.') : !name.startsWith('blocks.');
}

async function reference(part: Part): Promise<Map<string, number[]>> {
  const backend = createCpuBackend();
  const net = new Net(SMALL, backend, 0);
  for (const [name, p] of net.namedParameters())
    if (frozenNames(part, name)) p.requiresGrad = false;
  const optimizer = new AdamW(
    net.parameters().filter((p) => p.requiresGrad),
    { lr: 0.01 },
  );
  for (const batch of makeBatches(backend, SMALL, STEPS, BATCH)) {
    const [x, y] = slice(backend, batch, 0, BATCH);
    const loss = await net.call(x, y);
    await loss.backward();
    optimizer.step();
    optimizer.zeroGrad();
    for (const t of [x, y, loss]) t.free();
  }
  const out = new Map<string, number[]>();
  for (const [name, p] of net.namedParameters()) out.set(name, [...(await p.read())]);
  return out;
}

/** Freeze after wrapping, through the units' parameters(). */
function freeze(model: FullyShardedDataParallel, part: Part): Tensor[] {
  const units = part === 'trunk' ? model.units().slice(1) : [model];
  const shards = units.flatMap((u) => u.parameters({ recurse: false }));
  for (const s of shards) s.requiresGrad = false;
  return shards;
}

describe('freezing after wrapping (test_fsdp_freezing_weights, freeze_after_wrap_fsdp)', () => {
  for (const part of ['trunk', 'root'] as const) {
    for (const world of [2, 4]) {
      it(`the ${part === 'trunk' ? 'nested units' : "root's own weights"} frozen, world ${world}`, async () => {
        const expected = await reference(part);
        const rows = BATCH / world;
        const results = await onLocalRanks(world, async (group, backend) => {
          const model = wrapNet(new Net(SMALL, backend, 0), group, {}, true);
          const frozen = freeze(model, part);
          const optimizer = new AdamW(model.parameters(), { lr: 0.01 });
          const grads: (Tensor | null)[] = [];
          for (const batch of makeBatches(backend, SMALL, STEPS, BATCH)) {
            const [x, y] = slice(backend, batch, group.rank * rows, (group.rank + 1) * rows);
            const loss = await model.call(x, y);
            await loss.backward();
            grads.push(...frozen.map((s) => s.grad));
            optimizer.step();
            optimizer.zeroGrad();
            for (const t of [x, y, loss]) t.free();
          }
          const params = new Map<string, number[]>();
          await model.summonFullParams(async () => {
            for (const [name, p] of model.namedParameters())
              params.set(name, [...(await p.read())]);
          });
          return { params, grads };
        });
        for (const r of results) {
          expect(r.grads.every((g) => g === null)).toBe(true);
          expect([...r.params.keys()].sort()).toEqual([...expected.keys()].sort());
          for (const [name, values] of expected) {
            const got = r.params.get(name)!;
            for (let i = 0; i < values.length; i++) {
              expect(Math.abs(got[i]! - values[i]!), `${name}[${i}]`).toBeLessThanOrEqual(1e-5);
            }
          }
        }
      });
    }
  }
});

describe('unfreezing after wrapping', () => {
  for (const world of [2, 4]) {
    it(`the embedding frozen at wrap time, unfrozen through the root's shards, trains like one process, world ${world}`, async () => {
      const backend = createCpuBackend();
      const net = new Net(SMALL, backend, 0);
      const optimizer = new AdamW(net.parameters(), { lr: 0.01 });
      for (const batch of makeBatches(backend, SMALL, STEPS, BATCH)) {
        const [x, y] = slice(backend, batch, 0, BATCH);
        const loss = await net.call(x, y);
        await loss.backward();
        optimizer.step();
        optimizer.zeroGrad();
        for (const t of [x, y, loss]) t.free();
      }
      const expected = new Map<string, number[]>();
      for (const [name, p] of net.namedParameters()) expected.set(name, [...(await p.read())]);
      const rows = BATCH / world;
      const results = await onLocalRanks(world, async (group, b) => {
        const plain = new Net(SMALL, b, 0);
        plain.embed.weight.requiresGrad = false;
        plain.embed.bias!.requiresGrad = false;
        const model = wrapNet(plain, group, {}, true);
        // The root's frozen flat parameter: its own, the second of the root's shards.
        const frozen = model.parameters({ recurse: false }).filter((s) => !s.requiresGrad);
        expect(frozen).toHaveLength(1);
        frozen[0]!.requiresGrad = true;
        const opt = new AdamW(model.parameters(), { lr: 0.01 });
        for (const batch of makeBatches(b, SMALL, STEPS, BATCH)) {
          const [x, y] = slice(b, batch, group.rank * rows, (group.rank + 1) * rows);
          const loss = await model.call(x, y);
          await loss.backward();
          opt.step();
          opt.zeroGrad();
          for (const t of [x, y, loss]) t.free();
        }
        const params = new Map<string, number[]>();
        await model.summonFullParams(async () => {
          for (const [name, p] of model.namedParameters()) params.set(name, [...(await p.read())]);
        });
        return params;
      });
      for (const r of results) {
        for (const [name, values] of expected) {
          const got = r.get(name)!;
          for (let i = 0; i < values.length; i++) {
            expect(Math.abs(got[i]! - values[i]!), `${name}[${i}]`).toBeLessThanOrEqual(1e-5);
          }
        }
      }
    });
  }
});
