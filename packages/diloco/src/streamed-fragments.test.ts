import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import { AdamW } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { CompressedAverager } from './compressed-average.js';
import type { OuterCompression } from './compression.js';
import { DiLoCo } from './diloco.js';
import { DilocoArgumentError } from './errors.js';
import { dealFragments, fragmentDue } from './fragment-schedule.js';
import { buildModel, flat, type Model } from './test-support/mlp-case.js';
import { type Average, exactMean, StreamReference } from './test-support/stream-reference.js';
import { closeWorld, newSeed, randomValues } from './test-support/worlds.js';

// [Note: streamed fragments]: the schedule, one streamed outer step against a float64 reference,
// F = 1 and tau = 0 as plain DiLoCo, every codec per fragment, ranks that drift apart.

/** Each rank's inner step: its parameters moved by seeded noise (the same noise the reference adds). */
async function noise(seed: number, rank: number, step: number, size: number) {
  return randomValues(seed * 131 + rank * 17 + step * 7919, size);
}

async function train(model: Model, seed: number, rank: number, step: number): Promise<void> {
  for (const [i, p] of model.parameters().entries()) {
    const n = await noise(seed + i, rank, step, p.size);
    const values = (await p.read()) as Float32Array;
    p.write(values.map((v, k) => v + 0.05 * n[k]!));
  }
}

async function trainFlat(
  local: Float32Array | Float64Array,
  sizes: number[],
  seed: number,
  rank: number,
  step: number,
) {
  let offset = 0;
  for (const [i, size] of sizes.entries()) {
    const n = await noise(seed + i, rank, step, size);
    for (let k = 0; k < size; k++) local[offset + k] = local[offset + k]! + 0.05 * n[k]!;
    offset += size;
  }
}

interface StreamCase {
  compression: OuterCompression;
  fragments?: number;
  overlap?: number;
  mixing?: number;
  merge?: 'mix' | 'carry';
  innerSteps: number;
}

function codecOptions(compression: OuterCompression) {
  return compression === 'topk'
    ? { compression, blockSize: 16, density: 1 / 4 }
    : { compression, blockSize: 8 };
}

async function world(size: number, seed: number, c: StreamCase) {
  const groups = createLocalGroups(size);
  const models = groups.map(() => buildModel(seed));
  const dilocos = await Promise.all(
    groups.map((group, r) =>
      DiLoCo.create(models[r]!.parameters(), new AdamW(models[r]!.parameters()), {
        group,
        innerSteps: c.innerSteps,
        ...codecOptions(c.compression),
        ...(c.fragments === undefined ? {} : { fragments: c.fragments }),
        ...(c.overlap === undefined ? {} : { overlap: c.overlap }),
        ...(c.mixing === undefined ? {} : { mixing: c.mixing }),
        ...(c.merge === undefined ? {} : { merge: c.merge }),
      }),
    ),
  );
  return { groups, models, dilocos };
}

describe('streamed fragments', () => {
  it('deals each tensor to the emptiest fragment and syncs fragment p at s mod H = floor(p H / F)', () => {
    // A layer's tensors: two norms, a matrix and its bias, twice; the matrices land apart.
    expect(dealFragments([64, 64, 4096, 64, 64, 64, 4096, 64], 3)).toEqual([
      [0, 3, 5, 7],
      [1, 4, 6],
      [2],
    ]);
    expect(dealFragments([5, 5, 5, 5, 5, 5, 5], 3)).toEqual([
      [0, 3, 6],
      [1, 4],
      [2, 5],
    ]);
    const due = Array.from({ length: 24 }, (_, s) => fragmentDue(s + 1, 12, 3));
    // H = 12, F = 3: fragment 1 after step 4, fragment 2 after 8, fragment 0 after 12, again.
    const want = Array<number | null>(24).fill(null);
    for (const [step, p] of [
      [4, 1],
      [8, 2],
      [12, 0],
      [16, 1],
      [20, 2],
      [24, 0],
    ] as const) {
      want[step - 1] = p;
    }
    expect(due).toEqual(want);
    expect(Array.from({ length: 10 }, (_, s) => fragmentDue(s + 1, 5, 1))).toEqual([
      null,
      null,
      null,
      null,
      0,
      null,
      null,
      null,
      null,
      0,
    ]);
  });

  it.each([
    [2, 'mix'],
    [3, 'mix'],
    [2, 'carry'],
    [3, 'carry'],
  ] as const)(
    'F = 2, tau = 2 follows a float64 reference step by step (world %i, f32, merge %s)',
    async (size, merge) => {
      const seed = newSeed(`streamed reference, world ${size}, ${merge}`);
      const c = { compression: 'f32' as const, innerSteps: 4, fragments: 2, overlap: 2, merge };
      const { groups, models, dilocos } = await world(size, seed, c);
      const sizes = models[0]!.parameters().map((p) => p.size);
      const start = await flat(models[0]!);
      // mix: the paper's alpha 0.5 (f32's default); carry: the steps since the issue kept.
      const ref = new StreamReference(
        (n) => new Float64Array(n),
        models.map(() => Float64Array.from(start)),
        sizes,
        {
          innerSteps: 4,
          fragments: 2,
          overlap: 2,
          mixing: 0.5,
          ...(merge === 'carry' ? { merge } : {}),
          lr: 0.7,
          momentum: 0.9,
        },
        exactMean,
      );
      expect(dilocos[0]!.fragments).toEqual([[0], [1, 2, 3]]);
      const inFlight: (number | null)[] = [];
      for (let step = 1; step <= 13; step++) {
        for (let r = 0; r < size; r++) {
          await train(models[r]!, seed, r, step);
          await trainFlat(ref.locals[r]!, sizes, seed, r, step);
        }
        const results = await Promise.all(dilocos.map((d) => d.afterInnerStep()));
        await ref.afterStep(step);
        inFlight.push(dilocos[0]!.fragmentInFlight);
        expect(dilocos.map((d) => d.fragmentInFlight)).toEqual(Array(size).fill(ref.inFlight));
        // Fragment 1 lands after steps 4, 8, 12; fragment 0 after 6, 10.
        expect(results[0]!.synced).toBe([4, 6, 8, 10, 12].includes(step));
        for (let r = 0; r < size; r++) {
          const got = await flat(models[r]!);
          const want = ref.locals[r]!;
          for (let i = 0; i < got.length; i++) {
            expect(Math.abs(got[i]! - want[i]!)).toBeLessThanOrEqual(
              2e-5 * (1 + Math.abs(want[i]!)),
            );
          }
        }
      }
      // Fragment 1 issued after step 2, landed after 4 (and issued again), fragment 0 at 4 and 6...
      expect(inFlight).toEqual([null, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0]);
      // Every rank holds the same global copy, the reference's.
      const globals = dilocos.map((d) => d.globalParameters());
      for (const g of globals) expect(g).toEqual(globals[0]);
      for (const [p, elements] of ref.elements.entries()) {
        for (const [j, i] of elements.entries()) {
          expect(Math.abs(globals[0]![i]! - ref.global[p]![j]!)).toBeLessThanOrEqual(2e-5);
        }
      }
      await closeWorld(groups);
    },
  );

  it.each(['f32', 'bf16', 'int8', 'int4', 'topk'] as const)(
    'F = 1 and tau = 0 is plain DiLoCo bit for bit (%s)',
    async (compression) => {
      const seed = newSeed(`streamed F=1 tau=0 ${compression}`);
      const plain = await world(3, seed, { compression, innerSteps: 3 });
      const streamed = await world(3, seed, {
        compression,
        innerSteps: 3,
        fragments: 1,
        overlap: 0,
      });
      // One fragment of every tensor: the streamed code path, not plain DiLoCo's.
      expect(streamed.dilocos[0]!.fragments).toEqual([[0, 1, 2, 3]]);
      for (let step = 1; step <= 10; step++) {
        for (const w of [plain, streamed]) {
          for (const [r, m] of w.models.entries()) await train(m, seed, r, step);
          await Promise.all(w.dilocos.map((d) => d.afterInnerStep()));
        }
        for (let r = 0; r < 3; r++) {
          expect(await flat(streamed.models[r]!)).toEqual(await flat(plain.models[r]!));
        }
      }
      // And a sync at any other point (the trainer's last step).
      await Promise.all([...plain.dilocos, ...streamed.dilocos].map((d) => d.outerSync()));
      for (let r = 0; r < 3; r++) {
        expect(await flat(streamed.models[r]!)).toEqual(await flat(plain.models[r]!));
        const a = plain.dilocos[r]!.stateDict();
        const b = streamed.dilocos[r]!.stateDict();
        expect(b.global).toEqual(a.global);
        expect(b.momentumBuffer).toEqual(a.momentumBuffer);
        expect(b.residual).toEqual(a.residual);
      }
      expect(streamed.dilocos[0]!.outerStep).toBe(plain.dilocos[0]!.outerStep);
      expect(streamed.dilocos[0]!.bytesSent).toBe(plain.dilocos[0]!.bytesSent);
      await closeWorld([...plain.groups, ...streamed.groups]);
    },
  );

  it.each(['bf16', 'int8', 'int4', 'topk'] as const)(
    'each fragment keeps its own error feedback: %s, F = 2, tau = 1, against the reference in f32 bit for bit',
    async (compression) => {
      const seed = newSeed(`streamed codec ${compression}`);
      const size = 3;
      const c = { compression, innerSteps: 4, fragments: 2, overlap: 1 };
      const { groups, models, dilocos } = await world(size, seed, c);
      const sizes = models[0]!.parameters().map((p) => p.size);
      const start = await flat(models[0]!);
      // The reference averages each fragment with an averager of its own per rank; the default
      // merge is the paper's mixing 0.5, and carry for topk ([Note: merging a landed fragment]).
      const refGroups: ProcessGroup[][] = [createLocalGroups(size), createLocalGroups(size)];
      // topk tiles each tensor of the fragment ([Note: top-k tiles]), as DiLoCo passes them.
      const shapes = models[0]!.parameters().map((p) => p.shape);
      const averagers = refGroups.map((gs, p) =>
        gs.map(
          (g) =>
            new CompressedAverager(g, {
              ...codecOptions(compression),
              ...(compression === 'topk'
                ? { shapes: dilocos[0]!.fragments![p]!.map((t) => shapes[t]!) }
                : {}),
            }),
        ),
      );
      const average: Average = async (fragment, deltas) => {
        await Promise.all(
          deltas.map((d, r) => averagers[fragment]![r]!.average(d as Float32Array)),
        );
      };
      const topk = compression === 'topk';
      const ref = new StreamReference(
        (n) => new Float32Array(n),
        models.map(() => start.slice()),
        sizes,
        {
          ...c,
          mixing: topk ? 0 : 0.5,
          ...(topk ? { merge: 'carry' as const } : {}),
          lr: topk ? 1 : 0.7,
          momentum: topk ? 0 : 0.9,
        },
        average,
      );
      for (let step = 1; step <= 12; step++) {
        for (let r = 0; r < size; r++) {
          await train(models[r]!, seed, r, step);
          await trainFlat(ref.locals[r]!, sizes, seed, r, step);
        }
        await Promise.all(dilocos.map((d) => d.afterInnerStep()));
        await ref.afterStep(step);
        for (let r = 0; r < size; r++) expect(await flat(models[r]!)).toEqual(ref.locals[r]);
      }
      // The residuals are the fragments' own, laid out in parameter order.
      const residual = dilocos[0]!.stateDict().residual!;
      for (const [p, elements] of ref.elements.entries()) {
        const own = averagers[p]![0]!.residuals().input!;
        for (const [j, i] of elements.entries()) expect(residual[i]).toBe(own[j]);
      }
      await closeWorld([...groups, ...refGroups.flat()]);
    },
  );

  it('ranks that drift apart with a fragment in flight end with the same bits as ranks in step (int8)', async () => {
    const seed = newSeed('streamed drift');
    const c = { compression: 'int8' as const, innerSteps: 6, fragments: 3, overlap: 2 };
    const steps = 14;
    const inStep = await world(3, seed, c);
    for (let step = 1; step <= steps; step++) {
      for (const [r, m] of inStep.models.entries()) await train(m, seed, r, step);
      await Promise.all(inStep.dilocos.map((d) => d.afterInnerStep()));
    }
    // Each rank runs its own loop; rank 2 sleeps 15 ms a step, rank 1 a seeded 0-10 ms, rank 0 none.
    const drift = await world(3, seed, c);
    const at = [0, 0, 0];
    let lead = 0;
    await Promise.all(
      drift.dilocos.map(async (d, r) => {
        for (let step = 1; step <= steps; step++) {
          const pause = r === 2 ? 15 : r === 1 ? (seed + step) % 11 : 0;
          if (pause > 0) await new Promise((wake) => setTimeout(wake, pause));
          await train(drift.models[r]!, seed, r, step);
          await d.afterInnerStep();
          at[r] = step;
          if (r === 0 && d.fragmentInFlight !== null) lead = Math.max(lead, at[0]! - at[2]!);
        }
      }),
    );
    // Rank 0 ran ahead of rank 2 by the overlap while a fragment was on the wire.
    expect(lead).toBeGreaterThanOrEqual(2);
    for (let r = 0; r < 3; r++) {
      expect(await flat(drift.models[r]!)).toEqual(await flat(inStep.models[r]!));
      expect(drift.dilocos[r]!.globalParameters()).toEqual(inStep.dilocos[r]!.globalParameters());
    }
    await closeWorld([...inStep.groups, ...drift.groups]);
  });

  it('refuses fragments, overlap and mixing it cannot take, by name', async () => {
    const [group] = createLocalGroups(1);
    const model = buildModel(1);
    const make = (options: object) =>
      DiLoCo.create(model.parameters(), new AdamW(model.parameters()), {
        group: group!,
        innerSteps: 8,
        ...options,
      });
    await expect(make({ fragments: 0 })).rejects.toThrow(
      '[DiLoCo] rank 0: fragments must be a whole number from 1 to innerSteps (8), got 0',
    );
    await expect(make({ fragments: 5 })).rejects.toThrow(
      '[DiLoCo] rank 0: 5 fragments of 4 parameter tensors: a fragment holds whole tensors',
    );
    await expect(make({ fragments: 2, overlap: 5 })).rejects.toThrow(
      '[DiLoCo] rank 0: overlap must be a whole number from 0 to innerSteps / fragments (4), so that one fragment is on the wire at a time, got 5',
    );
    await expect(make({ mixing: 1 })).rejects.toThrow(DilocoArgumentError);
    await expect(make({ mixing: 1 })).rejects.toThrow(
      '[DiLoCo] rank 0: mixing must be in [0, 1), got 1',
    );
    await expect(make({ merge: 'blend' })).rejects.toMatchObject({ option: 'merge' });
    await expect(make({ merge: 'blend' })).rejects.toThrow(
      '[DiLoCo] rank 0: merge must be one of mix, carry, got blend',
    );
    await expect(make({ merge: 'carry', mixing: 0.5 })).rejects.toMatchObject({ option: 'mixing' });
    await expect(make({ merge: 'carry', mixing: 0.5 })).rejects.toThrow(
      "[DiLoCo] rank 0: mixing is the alpha of merge 'mix', not of 'carry'",
    );
    await closeWorld([group!]);
  });

  it('merges by carry with topk and by the paper mixing otherwise, unless told', async () => {
    const [group] = createLocalGroups(1);
    const model = buildModel(1);
    const make = async (options: object) =>
      (
        await DiLoCo.create(model.parameters(), new AdamW(model.parameters()), {
          group: group!,
          innerSteps: 8,
          fragments: 2,
          overlap: 2,
          ...options,
        })
      ).options;
    expect(await make({ compression: 'topk' })).toMatchObject({ merge: 'carry', mixing: 0 });
    expect(await make({ compression: 'int8' })).toMatchObject({ merge: 'mix', mixing: 0.5 });
    // A mixing given asks for the paper's merge, topk or not.
    expect(await make({ compression: 'topk', mixing: 0.5 })).toMatchObject({
      merge: 'mix',
      mixing: 0.5,
    });
    expect(await make({ compression: 'int8', merge: 'carry' })).toMatchObject({
      merge: 'carry',
      mixing: 0,
    });
    await closeWorld([group!]);
  });
});
