import { AdamW } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { DiLoCo } from './diloco.js';
import { DilocoArgumentError, DilocoStateError } from './errors.js';
import { MemoryOuterStateStore } from './outer-state-store.js';
import { backwardOn, buildModel } from './test-support/mlp-case.js';
import { closeWorld, createWorld, newSeed } from './test-support/worlds.js';

// [Note: the outer state in a store]: a member whose global copy and momentum live in a store
// holds none of them in memory and computes the same bits as a member that holds them.

function bits(values: Float32Array): Uint32Array {
  return new Uint32Array(values.buffer, values.byteOffset, values.length);
}

const H = 3;

describe('DiLoCo with the outer state in a store', () => {
  it('a member with a store and one without agree bit for bit after 4 int8 syncs with momentum; the store holds both vectors, the member neither', async () => {
    const seed = newSeed('diloco stored outer state');
    const world = await createWorld('local', 2);
    try {
      const models = [buildModel(seed), buildModel(seed)];
      const inner = models.map((m) => new AdamW(m.parameters(), { lr: 0.01 }));
      // Chunks of 5 elements: the seams fall inside every tensor (4 x 8, 8, 8, 1).
      const store = new MemoryOuterStateStore(5);
      const members = await Promise.all(
        world.map((group, r) =>
          DiLoCo.create(models[r]!.parameters(), inner[r]!, {
            group,
            innerSteps: H,
            compression: 'int8',
            ...(r === 1 ? { outerState: store } : {}),
          }),
        ),
      );
      const n = models[0]!.parameters().reduce((sum, p) => sum + p.size, 0);
      for (let step = 0; step < 4 * H; step++) {
        await Promise.all(
          members.map(async (d, r) => {
            // The ranks drift apart: rank 1 comes to the second sync a second after rank 0.
            if (r === 1 && step === 2 * H - 1) await new Promise((done) => setTimeout(done, 1000));
            await backwardOn(models[r]!, seed, r, step);
            await d.step();
          }),
        );
      }
      const [held, stored] = members as [DiLoCo, DiLoCo];
      expect(stored.outerStep).toBe(4);
      expect(held.outerStateWhere).toBe('memory');
      expect(stored.outerStateWhere).toBe('memory (a test store)');
      // Where the state lives: both vectors in the store, none in the member.
      expect(store.bytes).toBe(2 * n * 4);
      expect(() => stored.stateDict()).toThrow(DilocoStateError);
      expect(() => stored.globalParameters()).toThrow(DilocoStateError);
      const a = held.stateDict();
      const b = await stored.readStateDict();
      expect(bits(b.global)).toEqual(bits(a.global));
      expect(bits(b.momentumBuffer!)).toEqual(bits(a.momentumBuffer!));
      const chunks: number[] = [];
      for await (const chunk of stored.globalChunks()) chunks.push(...chunk);
      expect(bits(Float32Array.from(chunks))).toEqual(bits(a.global));
      // The parameters are the new global copy on both.
      for (const [i, p] of models[1]!.parameters().entries()) {
        const q = models[0]!.parameters()[i]!;
        expect(bits((await p.read()) as Float32Array)).toEqual(
          bits((await q.read()) as Float32Array),
        );
      }
      // A load into the store and a rounded momentum read back as they went in.
      await stored.loadStateDict(a);
      await stored.roundMomentum((m) => m.fill(0.5));
      const loaded = await stored.readStateDict();
      expect(bits(loaded.global)).toEqual(bits(a.global));
      expect([...loaded.momentumBuffer!].every((v) => v === 0.5)).toBe(true);
    } finally {
      await closeWorld(world);
    }
  });

  it('refuses a store with streamed syncs', async () => {
    const world = await createWorld('local', 1);
    try {
      const model = buildModel(1);
      const create = DiLoCo.create(model.parameters(), new AdamW(model.parameters()), {
        group: world[0]!,
        innerSteps: 2,
        fragments: 2,
        outerState: new MemoryOuterStateStore(),
      });
      await expect(create).rejects.toThrow(DilocoArgumentError);
    } finally {
      await closeWorld(world);
    }
  });
});
