// A consolidated FSDP checkpoint read by PyTorch: the same loss on the same tokens. Runs where
// WEBSHARD_TORCH_PYTHON, the repository's .venv-torch (`pnpm peers:torch`) or /usr/bin/python3
// (Debian's python3-torch) has torch (`findTorchPeer`'s reference use: a loss, not a speed);
// skipped with the reason elsewhere.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findRepoRoot, findTorchPeer } from '@webshard/bench';
import { AdamW, GPTBlock, type Tensor } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { Gpt, TINY_GPT, tokenBatches, tokenSlice } from '../test-support/gpt.js';
import { onLocalRanks } from '../test-support/ranks.js';
import { autoWrap, moduleClassAutoWrapPolicy } from '../wrap.js';
import { consolidateCheckpoint } from './consolidate.js';
import { saveShardedCheckpoint } from './sharded-checkpoint.js';

const peer = findTorchPeer(findRepoRoot(fileURLToPath(import.meta.url)), 'reference');
const python = 'skipped' in peer ? '' : peer.build.python;
const torchMissing =
  'skipped' in peer ? `no PyTorch (${peer.skipped}): PyTorch interop not checked` : null;
const script = join(dirname(fileURLToPath(import.meta.url)), '__fixtures__', 'torch_forward.py');

describe('a consolidated checkpoint in PyTorch', () => {
  if (torchMissing !== null) {
    // Skipped, not failed, where PyTorch is not installed (the suite must pass without it, as the
    // guide says): the skipped test's name is the reason, so the run's report says what is missing.
    it.skip(torchMissing, () => {});
    return;
  }
  it('gives PyTorch the loss webshard computes on the same tokens', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fsdp-torch-'));
    try {
      const [rows] = tokenBatches(TINY_GPT, 1, 4, 3);
      const [loss] = await onLocalRanks(2, async (group, backend) => {
        const model = autoWrap(new Gpt(TINY_GPT, backend), moduleClassAutoWrapPolicy([GPTBlock]), {
          group,
        });
        const optimizer = new AdamW(model.parameters(), { lr: 1e-2 });
        for (const batch of tokenBatches(TINY_GPT, 2, 4)) {
          const [x, y] = tokenSlice(backend, batch, group.rank * 2, group.rank * 2 + 2);
          const l = (await model.call(x, y)) as Tensor;
          await l.backward();
          optimizer.step();
          optimizer.zeroGrad();
        }
        await saveShardedCheckpoint(dir, { model, optimizer });
        // The loss on all four rows, on every rank (each rank computes it whole).
        const [x, y] = tokenSlice(backend, rows!, 0, 4);
        return (await model.call(x, y)).item();
      });
      const file = join(dir, 'model.safetensors');
      await consolidateCheckpoint(dir, file);
      const result = spawnSync(
        python,
        [script, file, JSON.stringify(TINY_GPT), JSON.stringify(rows)],
        {
          encoding: 'utf8',
        },
      );
      expect(result.status, result.stderr).toBe(0);
      const torchLoss = JSON.parse(result.stdout).loss as number;
      expect(Math.abs(torchLoss - loss!)).toBeLessThanOrEqual(1e-5 * Math.abs(torchLoss));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
