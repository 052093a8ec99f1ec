import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AdamW, createCpuBackend, GPTBlock, type Tensor } from '@webshard/tensor-core';
import { loadSafetensors } from '@webshard/tensor-core/node';
import { afterEach, describe, expect, it } from 'vitest';
import type { FullyShardedDataParallel } from '../fully-sharded.js';
import { gatherFullOptimStateDict } from '../optim-state.js';
import { fullStateDict } from '../state-dict.js';
import { Gpt, type GptConfig, TINY_GPT, tokenBatches, tokenSlice } from '../test-support/gpt.js';
import { onLocalRanks } from '../test-support/ranks.js';
import { autoWrap, moduleClassAutoWrapPolicy } from '../wrap.js';
import { SimulatedCrash, type WriteStage } from './atomic-write.js';
import { consolidateCheckpoint } from './consolidate.js';
import {
  CheckpointError,
  loadShardedCheckpoint,
  MANIFEST,
  saveShardedCheckpoint,
} from './sharded-checkpoint.js';

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'fsdp-ckpt-'));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const BATCH = 8;
type Group = Parameters<Parameters<typeof onLocalRanks>[1]>[0];
type Backend = Parameters<Parameters<typeof onLocalRanks>[1]>[1];

function wrap(group: Group, backend: Backend, config: GptConfig = TINY_GPT, seed = 0) {
  return autoWrap(new Gpt(config, backend, seed), moduleClassAutoWrapPolicy([GPTBlock]), { group });
}

async function steps(
  model: FullyShardedDataParallel,
  optimizer: AdamW,
  backend: Backend,
  from: number,
  count: number,
): Promise<number[]> {
  const group = model.options.group;
  const per = BATCH / group.size;
  const losses: number[] = [];
  for (const rows of tokenBatches(TINY_GPT, from + count, BATCH).slice(from)) {
    const [x, y] = tokenSlice(backend, rows, group.rank * per, (group.rank + 1) * per);
    const loss = (await model.call(x, y)) as Tensor;
    losses.push(await loss.item());
    await loss.backward();
    optimizer.step();
    optimizer.zeroGrad();
  }
  return losses;
}

async function snapshot(model: FullyShardedDataParallel, optimizer: AdamW) {
  const params: Record<string, number[]> = {};
  for (const [k, t] of await fullStateDict(model)) params[k] = [...(await t.read())];
  const optim = await gatherFullOptimStateDict(model, optimizer, { rank0Only: false });
  const moments: Record<string, unknown> = {};
  for (const [k, s] of Object.entries(optim!.state)) {
    moments[k] = Object.fromEntries(
      await Promise.all(
        Object.entries(s).map(async ([n, v]) => [
          n,
          v !== null && typeof v === 'object' ? [...(await v.read())] : v,
        ]),
      ),
    );
  }
  return { params, moments };
}

describe('sharded checkpoints', () => {
  it('saved at N and loaded at M give the same parameters and moments bit for bit, for every pair in {1, 2, 4}', async () => {
    for (const n of [1, 2, 4]) {
      const dir = tempDir();
      const [saved] = await onLocalRanks(n, async (group, backend) => {
        const model = wrap(group, backend);
        const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
        await steps(model, optimizer, backend, 0, 2);
        await saveShardedCheckpoint(dir, { model, optimizer, step: 2, extra: { epoch: 1 } });
        return snapshot(model, optimizer);
      });
      expect(readdirSync(dir).filter((f) => f.endsWith('.safetensors'))).toHaveLength(n);
      for (const m of [1, 2, 4]) {
        const loaded = await onLocalRanks(m, async (group, backend) => {
          const model = wrap(group, backend, TINY_GPT, 42);
          const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
          const meta = await loadShardedCheckpoint(dir, { model, optimizer });
          expect(meta).toEqual({ step: 2, extra: { epoch: 1 } });
          return snapshot(model, optimizer);
        });
        for (const l of loaded) expect(l, `saved at ${n}, loaded at ${m}`).toEqual(saved);
      }
    }
  });

  it('a run stopped between steps and resumed reproduces the uninterrupted losses exactly', async () => {
    const dir = tempDir();
    const uninterrupted = await onLocalRanks(2, async (group, backend) => {
      const model = wrap(group, backend);
      return steps(model, new AdamW(model.parameters(), { lr: 1e-2 }), backend, 0, 4);
    });
    await onLocalRanks(2, async (group, backend) => {
      const model = wrap(group, backend);
      const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
      await steps(model, optimizer, backend, 0, 2);
      await saveShardedCheckpoint(dir, { model, optimizer, step: 2 });
    });
    const resumed = await onLocalRanks(2, async (group, backend) => {
      const model = wrap(group, backend, TINY_GPT, 7);
      const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
      const { step } = await loadShardedCheckpoint(dir, { model, optimizer });
      return steps(model, optimizer, backend, step, 2);
    });
    resumed.forEach((losses, r) => {
      expect(losses).toEqual(uninterrupted[r]!.slice(2));
    });
  });

  it('a crash at any point of a save leaves the previous checkpoint whole and loadable', async () => {
    const dir = tempDir();
    const [first] = await onLocalRanks(1, async (group, backend) => {
      const model = wrap(group, backend);
      const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
      await steps(model, optimizer, backend, 0, 1);
      await saveShardedCheckpoint(dir, { model, optimizer, step: 1 });
      return snapshot(model, optimizer);
    });
    const stages: WriteStage[] = ['opened', 'written', 'synced', 'renamed'];
    for (const target of ['rank', MANIFEST]) {
      for (const stage of stages) {
        if (target === MANIFEST && stage === 'renamed') continue; // the new checkpoint is in place
        await onLocalRanks(1, async (group, backend) => {
          const model = wrap(group, backend);
          const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
          await steps(model, optimizer, backend, 0, 3);
          const crash = saveShardedCheckpoint(dir, {
            model,
            optimizer,
            step: 3,
            fault: (file, at) => {
              const isManifest = file.endsWith(MANIFEST);
              if (at === stage && isManifest === (target === MANIFEST))
                throw new SimulatedCrash(`${file} ${at}`);
            },
          });
          await expect(crash).rejects.toThrow(SimulatedCrash);
        });
        const [after] = await onLocalRanks(1, async (group, backend) => {
          const model = wrap(group, backend, TINY_GPT, 3);
          const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
          const { step } = await loadShardedCheckpoint(dir, { model, optimizer });
          expect(step).toBe(1);
          return snapshot(model, optimizer);
        });
        expect(after, `crash of ${target} at ${stage}`).toEqual(first);
      }
    }
  });

  describe('refuses what is not a whole checkpoint of this model, changing nothing', () => {
    async function saveOne(dir: string, config: GptConfig = TINY_GPT, world = 2): Promise<void> {
      await onLocalRanks(world, async (group, backend) => {
        const model = wrap(group, backend, config);
        const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
        await steps(model, optimizer, backend, 0, 1);
        await saveShardedCheckpoint(dir, { model, optimizer, step: 1 });
      });
    }

    async function expectRefused(dir: string, message: RegExp): Promise<void> {
      await onLocalRanks(2, async (group, backend) => {
        const model = wrap(group, backend, TINY_GPT, 11);
        const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
        await steps(model, optimizer, backend, 0, 1);
        const before = await snapshot(model, optimizer);
        const error = await loadShardedCheckpoint(dir, { model, optimizer }).then(
          () => null,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(CheckpointError);
        expect((error as Error).message).toMatch(message);
        expect(await snapshot(model, optimizer)).toEqual(before);
      });
    }

    function rankFile(dir: string, rank: number): string {
      return join(dir, readdirSync(dir).find((f) => f.includes(`-rank${rank}-of-`))!);
    }

    it('a truncated shard', async () => {
      const dir = tempDir();
      await saveOne(dir);
      const file = rankFile(dir, 1);
      writeFileSync(file, readFileSync(file).subarray(0, 100));
      await expectRefused(dir, /manifest says .* \(truncated\?\)/);
    });

    it('a corrupted shard (one byte flipped)', async () => {
      const dir = tempDir();
      await saveOne(dir);
      const file = rankFile(dir, 0);
      const bytes = readFileSync(file);
      bytes[bytes.length - 3] = bytes[bytes.length - 3]! ^ 0xff;
      writeFileSync(file, bytes);
      await expectRefused(dir, /SHA-256 differs from the manifest \(corrupted\)/);
    });

    it('a missing rank file', async () => {
      const dir = tempDir();
      await saveOne(dir);
      rmSync(rankFile(dir, 1));
      await expectRefused(dir, /the file of rank 1 of 2 is missing/);
    });

    it('an edited manifest (the step, or a recorded hash), and a version 1 manifest', async () => {
      const dir = tempDir();
      await saveOne(dir);
      const path = join(dir, MANIFEST);
      const original = readFileSync(path, 'utf8');
      writeFileSync(path, original.replace('"step": 1,', '"step": 3,'));
      await expectRefused(dir, /\(manifest\.json\): its SHA-256 differs from the one it records/);
      const edited = JSON.parse(original);
      edited.files[0].sha256 = '0'.repeat(64);
      writeFileSync(path, JSON.stringify(edited));
      await expectRefused(dir, /\(manifest\.json\): its SHA-256 differs from the one it records/);
      const { sha256: _, ...v1 } = { ...JSON.parse(original), version: 1 };
      writeFileSync(path, JSON.stringify(v1));
      await expectRefused(dir, /is not a webshard-fsdp-checkpoint manifest of version 2/);
    });

    it('a checkpoint of another model', async () => {
      const dir = tempDir();
      await saveOne(dir, { ...TINY_GPT, nEmbd: 8 });
      await expectRefused(dir, /a checkpoint of another model/);
    });

    it('a directory that is not a checkpoint, and a file', async () => {
      const dir = tempDir();
      await expectRefused(dir, /is not a checkpoint: no readable manifest.json/);
      writeFileSync(join(dir, 'x'), 'x');
      await expectRefused(join(dir, 'x'), /is not a directory/);
      writeFileSync(join(dir, MANIFEST), '{"format": "something else"}');
      await expectRefused(dir, /is not a webshard-fsdp-checkpoint manifest/);
    });
  });

  it('consolidates into one safetensors file under the model’s names', async () => {
    const dir = tempDir();
    const [full] = await onLocalRanks(2, async (group, backend) => {
      const model = wrap(group, backend);
      const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
      await steps(model, optimizer, backend, 0, 1);
      await saveShardedCheckpoint(dir, { model, optimizer });
      return (await snapshot(model, optimizer)).params;
    });
    const out = join(dir, 'model.safetensors');
    const names = await consolidateCheckpoint(dir, out);
    expect(names.sort()).toEqual(Object.keys(full!).sort());
    const { tensors } = await loadSafetensors(out, { backend: createCpuBackend() });
    for (const [name, values] of Object.entries(full!))
      expect([...(await tensors[name]!.read())]).toEqual(values);
  });
});
