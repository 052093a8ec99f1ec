import { createLocalGroups } from '@webshard/collectives';
import { AdamW, mseLoss, tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { DiLoCo } from './diloco.js';
import { type JoinMomentum, roundJoinMomentum } from './join-state.js';
import { backend, buildModel, type Model } from './test-support/mlp-case.js';
import { closeWorld, randomValues } from './test-support/worlds.js';

// What [Note: a compressed join] costs the world: every member rounds its outer momentum once, at
// the join. Two ranks learn a teacher MLP (DiLoCo H = 4, AdamW inside, Nesterov 0.9 outside) for
// 40 outer syncs; at sync 10 the momentum is rounded as a join would round it (or zeroed, as a
// join that sent no momentum would have to zero everyone's); the held-out loss at the end against
// the same run untouched. Measured (2026-11-25, seeds 4242, 17, 90001): bf16 -0.3 to 2.9 %, int8
// -2.1 to 0.2 %, int4 -45 to -6.8 %, zeroing -17 to 134 % (this small regression is chaotic: any
// nudge moves its end; what matters is the size of the nudge, and int8's is the smallest).
const SYNCS = 40;
const H = 4;

async function teacherBatch(teacher: Model, seed: number, rows: number) {
  const x = tensor(await randomValues(seed, rows * 4), { backend, shape: [rows, 4] });
  const y = tensor((await teacher.call(x).read()) as Float32Array, { backend, shape: [rows, 1] });
  return { x, y };
}

async function run(format: JoinMomentum | 'zero' | 'none', seed: number): Promise<number> {
  const teacher = buildModel(seed + 1000);
  const groups = createLocalGroups(2);
  const models = groups.map(() => buildModel(seed));
  const dilocos = await Promise.all(
    groups.map((group, r) =>
      DiLoCo.create(models[r]!.parameters(), new AdamW(models[r]!.parameters(), { lr: 0.01 }), {
        group,
        innerSteps: H,
      }),
    ),
  );
  for (let sync = 0; sync < SYNCS; sync++) {
    if (sync === 10 && format !== 'none') {
      for (const d of dilocos) {
        d.roundMomentum((m) =>
          format === 'zero' ? m.fill(0) : roundJoinMomentum(m, { momentum: format }),
        );
      }
    }
    for (let i = 0; i < H; i++) {
      await Promise.all(
        dilocos.map(async (d, r) => {
          const { x, y } = await teacherBatch(teacher, seed * 977 + (sync * H + i) * 2 + r, 16);
          models[r]!.zeroGrad({ setToNone: true });
          await mseLoss(models[r]!.call(x), y).backward();
          await d.step();
        }),
      );
    }
  }
  const { x, y } = await teacherBatch(teacher, seed + 5, 256);
  const loss = (await mseLoss(models[0]!.call(x), y).read())[0]!;
  await closeWorld(groups);
  return loss;
}

describe('the loss cost of rounding the outer momentum at a join', () => {
  it('int8 (the join format) ends within 5 % of the untouched run over 3 seeds; bf16, int4 and zeroing shown beside', async () => {
    const worst: Record<string, number> = {};
    for (const seed of [4242, 17, 90_001]) {
      const exact = await run('none', seed);
      const rows: string[] = [];
      for (const format of ['bf16', 'int8', 'int4', 'zero'] as const) {
        const gap = ((await run(format, seed)) - exact) / exact;
        worst[format] = Math.max(worst[format] ?? 0, Math.abs(gap));
        rows.push(`${format} ${(100 * gap).toFixed(2)} %`);
      }
      console.log(
        `seed ${seed}: held-out loss after ${SYNCS} syncs ${exact.toExponential(3)} untouched; ${rows.join(', ')}`,
      );
    }
    expect(worst.int8).toBeLessThan(0.05);
    // The rounding really happened: zeroing the momentum moves the loss far more.
    expect(worst.zero).toBeGreaterThan(worst.int8!);
  }, 300_000);
});
