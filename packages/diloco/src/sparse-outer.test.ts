import { createLocalGroups } from '@webshard/collectives';
import { AdamW, SGD } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { DiLoCo } from './diloco.js';
import { DilocoArgumentError } from './errors.js';
import { backwardOn, buildModel, flat } from './test-support/mlp-case.js';
import {
  referenceTensorLevels,
  referenceTileLevels,
  referenceTiles,
} from './test-support/topk-reference.js';
import { closeWorld, newSeed } from './test-support/worlds.js';

// The outer step with the codecs beside int8: topk (SparseLoCo) against a float64 reference, int4's
// bits and bytes. The MLP has 49 parameters.

describe('DiLoCo with topk and int4', () => {
  for (const levels of ['tile', 'tensor'] as const) {
    it(`each topk outer step follows a float64 reference: decayed feedback, top-k of each tile, 2 bits per ${levels}, mean over senders, SGD at lr 1`, async () => {
      const seed = newSeed(`diloco topk reference ${levels}`);
      const size = 2;
      const groups = createLocalGroups(size);
      const models = groups.map((_, r) => buildModel(seed + r));
      const dilocos = await Promise.all(
        groups.map((group, r) =>
          DiLoCo.create(models[r]!.parameters(), new AdamW(models[r]!.parameters(), { lr: 0.01 }), {
            group,
            innerSteps: 100,
            compression: 'topk',
            // Tiles of at most 4 x 4, a quarter of each sent ([Note: top-k tiles]).
            blockSize: 16,
            density: 0.25,
            levels,
          }),
        ),
      );
      // SparseLoCo's outer step: plain SGD at lr 1, the decayed feedback (0.8, measured) as momentum.
      expect(dilocos[0]!.options).toMatchObject({
        outerLr: 1,
        outerMomentum: 0,
        nesterov: false,
        errorDecay: 0.8,
      });
      const count = (await flat(models[0]!)).length;
      expect(count).toBe(49);
      const shapes = models[0]!.parameters().map((p) => p.shape);
      expect(shapes).toEqual([[8, 4], [8], [1, 8], [1]]);
      const tensors = referenceTiles(shapes, count, 4);
      const reference = (e: Float64Array) =>
        levels === 'tile'
          ? referenceTileLevels(e, tensors.flat(), 0.25)
          : referenceTensorLevels(e, tensors, 0.25);
      // Per tile: 2 tiles of 4 x 4 (4 entries of 4 + 2 bits), 2 runs of 4 of the bias, 2 of 1 x 4
      // of the second weight (1 entry of 2 + 2 bits) and the last bias (1 of 1 + 2): each 2 level
      // words and its entries in 1 word, 7 x 3 words. Per tensor: 5 level words each, and 48, 8, 8
      // and 3 bits of entries: 7 + 6 + 6 + 6 words. To the 1 other rank.
      const bytes = levels === 'tile' ? 21 * 4 : 25 * 4;
      const senderCounts = new Set<number>();
      for (let outer = 0; outer < 3; outer++) {
        for (let inner = 0; inner < 2; inner++) {
          for (let r = 0; r < size; r++) await backwardOn(models[r]!, seed, r, outer * 2 + inner);
          for (const d of dilocos) d.inner.step();
        }
        // The reference starts from the wrappers' own state: the f32 global copy and buffers.
        const global = dilocos[0]!.globalParameters();
        const locals = await Promise.all(models.map(flat));
        // Each position the mean over the ranks that sent it (SparseLoCo's code), not over all.
        const sum = new Float64Array(count);
        const senders = new Float64Array(count);
        const buffers = dilocos.map((d, r) => {
          const previous = d.stateDict().residual ?? new Float32Array(count);
          const e = new Float64Array(count);
          for (let i = 0; i < count; i++) {
            const delta = Math.fround(global[i]! - locals[r]![i]!);
            e[i] = Math.fround(0.8 * previous[i]! + delta);
          }
          const sent = reference(e);
          for (let i = 0; i < count; i++) {
            sum[i]! += sent[i]!;
            if (sent[i] !== 0) senders[i]!++;
            e[i]! -= sent[i]!;
          }
          return e;
        });
        const mean = sum.map((x, i) => (senders[i] === 0 ? 0 : x / senders[i]!));
        for (const c of senders) if (c > 0) senderCounts.add(c);
        const stats = await Promise.all(dilocos.map((d) => d.outerSync()));
        expect(stats.map((s) => s.bytesSent)).toEqual([bytes, bytes]);
        for (const [r, model] of models.entries()) {
          const got = await flat(model);
          for (let i = 0; i < count; i++) {
            const want = global[i]! - mean[i]!;
            expect(Math.abs(got[i]! - want)).toBeLessThanOrEqual(1e-6 * (1 + Math.abs(want)));
          }
          const residual = dilocos[r]!.stateDict().residual!;
          for (let i = 0; i < count; i++) {
            expect(Math.abs(residual[i]! - buffers[r]![i]!)).toBeLessThanOrEqual(1e-6);
          }
        }
        // Every rank holds the same global bits.
        expect(dilocos[1]!.globalParameters()).toEqual(dilocos[0]!.globalParameters());
      }
      expect(dilocos[0]!.bytesSent).toBe(3 * bytes);
      // Positions both ranks sent and positions one rank sent: the two cases of the mean.
      expect([...senderCounts].sort()).toEqual([1, 2]);
      await closeWorld(groups);
    });
  }

  it('int4 syncs at world 3 leave every rank with the same bits and count their bytes', async () => {
    const seed = newSeed('diloco int4');
    const groups = createLocalGroups(3);
    const models = groups.map((_, r) => buildModel(seed + r));
    const dilocos = await Promise.all(
      groups.map((group, r) =>
        DiLoCo.create(models[r]!.parameters(), new AdamW(models[r]!.parameters(), { lr: 0.01 }), {
          group,
          innerSteps: 2,
          compression: 'int4',
          blockSize: 16,
        }),
      ),
    );
    for (let step = 0; step < 4; step++) {
      for (let r = 0; r < 3; r++) await backwardOn(models[r]!, seed, r, step);
      await Promise.all(dilocos.map((d) => d.step()));
    }
    const [a, b, c] = await Promise.all(models.map(flat));
    expect(new Uint32Array(b!.buffer)).toEqual(new Uint32Array(a!.buffer));
    expect(new Uint32Array(c!.buffer)).toEqual(new Uint32Array(a!.buffer));
    // 4 blocks of 16, 2 per rank (padded to 6), 3 words a block (a scale, 16 nibbles), 2 phases
    // of 2 sends, 2 syncs: half of int8's bytes a value.
    expect(dilocos[0]!.bytesSent).toBe(2 * (2 * 2 * 2 * 3 * 4));
    await closeWorld(groups);
  });

  it('refuses a bad density or decay by name, with the op and the rank first', async () => {
    const [group] = createLocalGroups(1);
    const model = buildModel(1);
    const inner = new SGD(model.parameters(), { lr: 0.1 });
    const make = (options: object) =>
      DiLoCo.create(model.parameters(), inner, { group: group!, innerSteps: 1, ...options });
    await expect(make({ compression: 'topk', density: 0 })).rejects.toThrow(DilocoArgumentError);
    await expect(make({ compression: 'topk', density: 0 })).rejects.toThrow(
      '[DiLoCo] rank 0: density must be in (0, 1], got 0',
    );
    await expect(make({ compression: 'topk', density: 1.01 })).rejects.toMatchObject({
      option: 'density',
    });
    await expect(make({ compression: 'int4', density: 0.02 })).rejects.toThrow(
      '[DiLoCo] rank 0: density applies to the topk compression, not int4',
    );
    await expect(make({ compression: 'topk', errorDecay: 1.5 })).rejects.toThrow(
      '[DiLoCo] rank 0: errorDecay must be in [0, 1], got 1.5',
    );
    await expect(make({ compression: 'int8', levels: 'tensor' })).rejects.toThrow(
      '[DiLoCo] rank 0: levels apply to the topk compression, not int8',
    );
    await expect(make({ compression: 'topk', levels: 'chunk' })).rejects.toThrow(
      "[DiLoCo] rank 0: levels must be one of tile, tensor, got 'chunk'",
    );
    await expect(make({ compression: 'int8', shapes: [[49]] })).rejects.toThrow(
      '[DiLoCo] rank 0: shapes apply to the topk compression, not int8',
    );
    await expect(make({ compression: 'topk', shapes: [[7, -1]] })).rejects.toThrow(
      '[DiLoCo] rank 0: shape 0 is not a list of whole numbers >= 0: [7,-1]',
    );
    await expect(make({ compression: 'topk', blockSize: 131072 })).rejects.toMatchObject({
      option: 'blockSize',
    });
    // Given explicitly, the outer momentum stays (topk only changes the defaults).
    const chosen = await make({ compression: 'topk', outerLr: 0.7, outerMomentum: 0.9 });
    expect(chosen.options).toMatchObject({ outerLr: 0.7, outerMomentum: 0.9, nesterov: true });
    await closeWorld([group!]);
  });
});
