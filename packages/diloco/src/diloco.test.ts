import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import { AdamW, SGD } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { DiLoCo } from './diloco.js';
import { DilocoArgumentError, DilocoStateError } from './errors.js';
import { dilocoWorld } from './test-support/diloco-world.js';
import { backwardOn, buildModel, flat, type Model } from './test-support/mlp-case.js';
import { closeWorld, newSeed } from './test-support/worlds.js';

describe('DiLoCo', () => {
  it.each([2, 3])(
    'H = 1 with outer SGD (lr 1, momentum 0) equals DDP with the same inner SGD to 1e-6 (world %i)',
    async (size) => {
      const seed = newSeed(`diloco H=1 vs ddp, world ${size}`);
      const steps = 5;
      // DiLoCo.
      const groups = createLocalGroups(size);
      const models = groups.map(() => buildModel(seed));
      const dilocos = await Promise.all(
        groups.map((group, r) =>
          DiLoCo.create(models[r]!.parameters(), new SGD(models[r]!.parameters(), { lr: 0.1 }), {
            group,
            innerSteps: 1,
            outerLr: 1,
            outerMomentum: 0,
          }),
        ),
      );
      for (let step = 0; step < steps; step++) {
        for (let r = 0; r < size; r++) await backwardOn(models[r]!, seed, r, step);
        const results = await Promise.all(dilocos.map((d) => d.step()));
        expect(results.every((s) => s.synced)).toBe(true);
      }
      // DDP: gradients averaged over the group before the same SGD step.
      const ddpGroups = createLocalGroups(size);
      const ddpModels = ddpGroups.map(() => buildModel(seed));
      const optimizers = ddpModels.map((m) => new SGD(m.parameters(), { lr: 0.1 }));
      for (let step = 0; step < steps; step++) {
        for (let r = 0; r < size; r++) await backwardOn(ddpModels[r]!, seed, r, step);
        await Promise.all(
          ddpGroups.map(async (group, r) => {
            for (const p of ddpModels[r]!.parameters()) {
              await group.allReduce(p.grad!, { op: 'avg' }).wait();
            }
          }),
        );
        for (const o of optimizers) o.step();
      }
      const want = await flat(ddpModels[0]!);
      for (const model of models) {
        const got = await flat(model);
        for (let i = 0; i < want.length; i++) {
          expect(Math.abs(got[i]! - want[i]!)).toBeLessThanOrEqual(1e-6);
        }
      }
      await closeWorld([...groups, ...ddpGroups]);
    },
  );

  it('the outer step with AdamW inside and Nesterov outside follows a float64 reference (H = 2)', async () => {
    const seed = newSeed('diloco outer reference');
    const size = 2;
    const groups = createLocalGroups(size);
    const models = groups.map((_, r) => buildModel(seed + r));
    const dilocos = await Promise.all(
      groups.map((group, r) =>
        DiLoCo.create(models[r]!.parameters(), new AdamW(models[r]!.parameters(), { lr: 0.01 }), {
          group,
          // Syncs are called by hand below, every 2 steps.
          innerSteps: 100,
        }),
      ),
    );
    // Rank 0's initial parameters reach every rank.
    const start = await flat(models[0]!);
    expect(await flat(models[1]!)).toEqual(start);
    const global = Float64Array.from(start);
    let buffer: Float64Array | null = null;
    for (let outer = 0; outer < 3; outer++) {
      for (let inner = 0; inner < 2; inner++) {
        for (let r = 0; r < size; r++) await backwardOn(models[r]!, seed, r, outer * 2 + inner);
        if (inner === 0) {
          await Promise.all(dilocos.map((d) => d.step()));
          continue;
        }
        // The last inner step by hand, so the locals can be read before the sync.
        for (const d of dilocos) d.inner.step();
        const locals = await Promise.all(models.map(flat));
        const g = new Float64Array(global.length);
        for (const local of locals)
          for (let i = 0; i < g.length; i++) g[i]! += (global[i]! - local[i]!) / size;
        if (buffer === null) buffer = Float64Array.from(g);
        else for (let i = 0; i < g.length; i++) buffer[i] = 0.9 * buffer[i]! + g[i]!;
        for (let i = 0; i < g.length; i++) global[i]! -= 0.7 * (g[i]! + 0.9 * buffer[i]!);
        const stats = await Promise.all(dilocos.map((d) => d.outerSync()));
        expect(stats.map((s) => s.outerStep)).toEqual([outer + 1, outer + 1]);
        for (const model of models) {
          const got = await flat(model);
          for (let i = 0; i < got.length; i++) {
            expect(Math.abs(got[i]! - global[i]!)).toBeLessThanOrEqual(
              1e-6 * (1 + Math.abs(global[i]!)),
            );
          }
        }
      }
    }
    await closeWorld(groups);
  });

  it('int8 syncs at world 3 leave every rank with the same bits and count their bytes', async () => {
    const seed = newSeed('diloco int8');
    const groups = createLocalGroups(3);
    const models = groups.map((_, r) => buildModel(seed + r));
    const dilocos = await Promise.all(
      groups.map((group, r) =>
        DiLoCo.create(models[r]!.parameters(), new AdamW(models[r]!.parameters(), { lr: 0.01 }), {
          group,
          innerSteps: 2,
          compression: 'int8',
          blockSize: 16,
        }),
      ),
    );
    for (let step = 0; step < 4; step++) {
      for (let r = 0; r < 3; r++) await backwardOn(models[r]!, seed, r, step);
      const results = await Promise.all(dilocos.map((d) => d.step()));
      expect(results[0]!.synced).toBe(step % 2 === 1);
    }
    const [a, b, c] = await Promise.all(models.map(flat));
    expect(new Uint32Array(b!.buffer)).toEqual(new Uint32Array(a!.buffer));
    expect(new Uint32Array(c!.buffer)).toEqual(new Uint32Array(a!.buffer));
    // 49 parameters: 4 blocks of 16, 2 per rank (padded to 6), 5 words a block, 2 phases of 2 sends.
    expect(dilocos[0]!.bytesSent).toBe(2 * (2 * 2 * 2 * 5 * 4));
    await closeWorld(groups);
  });

  it('afterInnerStep counts a step the caller took and syncs as step() does', async () => {
    const seed = newSeed('diloco afterInnerStep');
    const run = async (own: boolean) => {
      const groups = createLocalGroups(2);
      const models = groups.map((_, r) => buildModel(seed + r));
      const inners = models.map((m) => new AdamW(m.parameters(), { lr: 0.01 }));
      const dilocos = await Promise.all(
        groups.map((group, r) =>
          DiLoCo.create(models[r]!.parameters(), inners[r]!, { group, innerSteps: 2 }),
        ),
      );
      const synced: boolean[] = [];
      for (let step = 0; step < 4; step++) {
        for (let r = 0; r < 2; r++) await backwardOn(models[r]!, seed, r, step);
        if (own) for (const o of inners) o.step();
        const results = await Promise.all(
          dilocos.map((d) => (own ? d.afterInnerStep() : d.step())),
        );
        synced.push(results[0]!.synced);
      }
      expect(dilocos[0]!.innerStep).toBe(4);
      const result = await flat(models[0]!);
      await closeWorld(groups);
      return { synced, result };
    };
    const viaStep = await run(false);
    const viaAfter = await run(true);
    expect(viaAfter.synced).toEqual([false, true, false, true]);
    expect(viaAfter).toEqual(viaStep);
  });

  it('its state dict resumes a run bit for bit', async () => {
    const seed = newSeed('diloco state dict');
    const run = async (stopAt: number | null) => {
      const groups = createLocalGroups(2);
      const models = groups.map((_, r) => buildModel(seed + r));
      const inners = models.map((m) => new AdamW(m.parameters(), { lr: 0.01 }));
      const make = (ms: Model[], os: AdamW[], gs: ProcessGroup[]) =>
        Promise.all(
          gs.map((group, r) =>
            DiLoCo.create(ms[r]!.parameters(), os[r]!, {
              group,
              innerSteps: 2,
              compression: 'int8',
            }),
          ),
        );
      let dilocos = await make(models, inners, groups);
      for (let step = 0; step < 6; step++) {
        if (step === stopAt) {
          const saved = dilocos.map((d) => d.stateDict());
          const savedInner = inners.map((o) => o.stateDict());
          // A fresh job: new models (other initial values), optimizers and wrappers, then the load.
          const fresh = groups.map((_, r) => buildModel(seed + 100 + r));
          const freshInners = fresh.map((m) => new AdamW(m.parameters(), { lr: 0.01 }));
          dilocos = await make(fresh, freshInners, groups);
          for (const [r, d] of dilocos.entries()) {
            d.loadStateDict(saved[r]!);
            await freshInners[r]!.loadStateDict(savedInner[r]!);
          }
          models.splice(0, 2, ...fresh);
          inners.splice(0, 2, ...freshInners);
        }
        for (let r = 0; r < 2; r++) await backwardOn(models[r]!, seed, r, step);
        await Promise.all(dilocos.map((d) => d.step()));
      }
      const result = await flat(models[0]!);
      await closeWorld(groups);
      return result;
    };
    const whole = await run(null);
    // Saved after 4 inner steps (2 syncs), loaded into a fresh job, 2 more steps.
    const resumed = await run(4);
    expect(new Uint32Array(resumed.buffer)).toEqual(new Uint32Array(whole.buffer));
  });

  it('refuses bad options with a typed error naming the option, before anything is sent', async () => {
    const [group] = createLocalGroups(1);
    const model = buildModel(1);
    const inner = new SGD(model.parameters(), { lr: 0.1 });
    const make = (options: object) =>
      DiLoCo.create(model.parameters(), inner, { group: group!, innerSteps: 1, ...options });
    await expect(make({ innerSteps: 0 })).rejects.toThrow(DilocoArgumentError);
    await expect(make({ innerSteps: 0 })).rejects.toThrow(
      '[DiLoCo] rank 0: innerSteps (H) must be a whole number >= 1, got 0',
    );
    await expect(make({ innerSteps: 1.5 })).rejects.toMatchObject({ option: 'innerSteps' });
    await expect(make({ compression: 'fp8' })).rejects.toThrow(
      "[DiLoCo] rank 0: unknown outer compression 'fp8' (f32, bf16, int8, int4, topk)",
    );
    await expect(make({ outerMomentum: 1 })).rejects.toMatchObject({ option: 'outerMomentum' });
    await expect(make({ outerLr: 0 })).rejects.toMatchObject({ option: 'outerLr' });
    await expect(make({ outerMomentum: 0, nesterov: true })).rejects.toMatchObject({
      option: 'nesterov',
    });
    await expect(make({ blockSize: 10 })).rejects.toMatchObject({ option: 'blockSize' });
    await expect(make({ timeoutMs: -1 })).rejects.toMatchObject({ option: 'timeoutMs' });
    await expect(DiLoCo.create([], inner, { group: group!, innerSteps: 1 })).rejects.toThrow(
      '[DiLoCo] rank 0: got no parameters',
    );
    await closeWorld([group!]);
  });

  it('refuses a step while a sync runs, and a state dict of another model', async () => {
    const groups = createLocalGroups(2);
    const models = groups.map(() => buildModel(3));
    const dilocos = await Promise.all(
      groups.map((group, r) =>
        DiLoCo.create(models[r]!.parameters(), new SGD(models[r]!.parameters(), { lr: 0.1 }), {
          group,
          innerSteps: 5,
        }),
      ),
    );
    const sync = dilocos[0]!.outerSync();
    await expect(dilocos[0]!.step()).rejects.toThrow(DilocoStateError);
    await expect(dilocos[0]!.step()).rejects.toThrow(
      '[step] rank 0: an outer sync is running: await it first',
    );
    await Promise.all([sync, dilocos[1]!.outerSync()]);
    const state = { ...dilocos[0]!.stateDict(), global: new Float32Array(3) };
    expect(() => dilocos[0]!.loadStateDict(state)).toThrow(
      '[loadStateDict] rank 0: global has 3 elements, the wrapped parameters 49',
    );
    await closeWorld(groups);
  });

  it.each([
    { steps: 6, outerSteps: [4, 6] },
    { steps: 8, outerSteps: [4, 8] },
  ])(
    'step({ last }) after $steps steps (H = 4) syncs once at the end, due or not: outer syncs after steps $outerSteps',
    async ({ steps, outerSteps }) => {
      const seed = newSeed('diloco last step');
      const groups = createLocalGroups(2);
      const { models, dilocos } = await dilocoWorld(groups, seed, { innerSteps: 4 });
      const synced: number[] = [];
      for (let step = 1; step <= steps; step++) {
        for (let r = 0; r < 2; r++) await backwardOn(models[r]!, seed, r, step);
        const last = step === steps;
        const results = await Promise.all(dilocos.map((d) => d.step({ last })));
        if (results[0]!.synced) synced.push(step);
      }
      expect(synced).toEqual(outerSteps);
      // A sync run twice at a due last step would count 3 outer steps, the second on momentum.
      expect(dilocos.map((d) => d.outerStep)).toEqual([2, 2]);
      const global = dilocos[0]!.globalParameters();
      for (const model of models) expect(await flat(model)).toEqual(global);
      await closeWorld(groups);
    },
  );
});
