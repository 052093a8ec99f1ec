import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import * as source from '../index.js';

// Training steps of the trainer's default GPT from the built package, against the same steps from
// the source. The bundles choose the order their modules evaluate in, and the matmul's workers run
// function sources taken from the bundle, so a part that is whole in the source can be missing or
// different in dist (the gradient table's layout entries were, in stop 78: built-gradients.test.ts).
// A plain `node` (no source condition: the package resolves to dist/) runs three AdamW steps on two
// matmul threads (the default GPT's linear layers split between them), ESM and CommonJS; the losses
// must be the source's to the bit. Needs `pnpm build` (CI builds before it tests); skipped outside
// CI when dist/ is missing.
const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const built = existsSync(join(packageDir, 'dist', 'index.js'));
const run = promisify(execFile);

type TensorCore = typeof source;

/**
 * Three steps' losses; the same text runs here on the source and in dist's child processes (so no
 * named inner function: a transform that keeps names would wrap it in a helper the child lacks).
 */
async function losses(tc: TensorCore): Promise<number[]> {
  const backend = tc.createCpuBackend({ matmulThreads: 2, matmulFma: 'off' });
  await backend.startMatmulThreads();
  const config = {
    blockSize: 32,
    nLayer: 2,
    nHead: 4,
    nEmbd: 64,
    dropout: 0,
    bias: true,
    vocabSize: 65,
  };
  const model = new tc.GPT(config, { backend, generator: new tc.RandomGenerator(11) });
  const params = model.parameters();
  const optimizer = new tc.AdamW(params, { lr: 3e-3, betas: [0.9, 0.95], weightDecay: 0.1 });
  const random = tc.mulberry32(5);
  const out: number[] = [];
  for (let step = 0; step < 3; step++) {
    const [x, y] = [0, 1].map(() =>
      tc.tensor(
        Int32Array.from({ length: 512 }, () => Math.floor(random() * 65)),
        {
          backend,
          dtype: 'i32',
          shape: [16, 32],
        },
      ),
    ) as [source.Tensor, source.Tensor];
    const loss = tc.tidy(() => {
      const result = model.call(x, y);
      result.logits.free();
      return result.loss!;
    });
    await loss.backward();
    await tc.clipGradNorm(params, 1);
    optimizer.step();
    optimizer.zeroGrad();
    out.push(await loss.item());
    for (const t of [x, y, loss]) t.free();
  }
  backend.dispose();
  return out;
}

// Skipped only outside CI where dist/ is missing (no `pnpm build` yet); CI builds first, so it runs.
describe.skipIf(!built && !process.env.CI)('the built package', () => {
  for (const format of ['esm', 'cjs'] as const) {
    it(`trains the default GPT with the source's losses, to the bit (${format})`, async () => {
      const load =
        format === 'esm'
          ? "await import('@webshard/tensor-core')"
          : "require('@webshard/tensor-core')";
      const body = `const losses = ${losses.toString()};\nconsole.log(JSON.stringify(await losses(${load})));\nprocess.exit(0);`;
      const script = format === 'esm' ? body : `(async () => {${body}})();`;
      const [{ stdout }, expected] = await Promise.all([
        run(
          process.execPath,
          [`--input-type=${format === 'esm' ? 'module' : 'commonjs'}`, '-e', script],
          {
            cwd: packageDir,
            timeout: 90_000,
          },
        ),
        losses(source),
      ]);
      const got = JSON.parse(stdout.trim().split('\n').at(-1)!) as number[];
      expect(got).toHaveLength(3);
      expect(got).toEqual(expected);
    }, 120_000);
  }
});
