import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  createCpuBackend,
  GPT,
  type GPTConfig,
  noGrad,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { loadSafetensors, saveSafetensors } from '@webshard/tensor-core/node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadInitialWeights } from './build-model.js';
import { UsageError } from '../errors.js';
import { runMain } from '../test-support/cli.js';
import { FIXTURES } from '../test-support/fixtures.js';

/**
 * `__fixtures__/make_hf_gpt2.py`: a small GPT-2 in transformers' layout (GPT2LMHeadModel's names,
 * Conv1D weights [in, out], the tied head left out, 24 positions) and the logits of a NumPy
 * transcription of transformers' forward, in float64.
 */
const HF = join(FIXTURES, 'hf-gpt2.safetensors');
const REFERENCE = join(FIXTURES, 'hf-gpt2.reference.safetensors');
const CONFIG: GPTConfig = {
  vocabSize: 101,
  blockSize: 16,
  nLayer: 2,
  nHead: 4,
  nEmbd: 32,
  dropout: 0,
  bias: true,
};

const backend = createCpuBackend();
let dir: string;
let ids: Int32Array;
let expected: Float64Array;
let hf: Record<string, Tensor>;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-hf-'));
  const reference = (await loadSafetensors(REFERENCE, { backend })).tensors;
  ids = (await reference.ids!.read()) as Int32Array;
  expected = (await reference.logits!.read()) as Float64Array;
  hf = (await loadSafetensors(HF, { backend })).tensors;
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function freshModel(config: GPTConfig = CONFIG): GPT {
  return new GPT(config, { backend });
}

async function logitsOf(model: GPT): Promise<Float32Array> {
  const input = tensor(ids, { backend: model.wte.weight.backend, dtype: 'i32', shape: [2, 16] });
  const { logits } = await noGrad(() => model.forward(input));
  const values = (await logits.read()) as Float32Array;
  logits.free();
  input.free();
  return values;
}

function maxGap(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let gap = 0;
  for (let i = 0; i < want.length; i++) gap = Math.max(gap, Math.abs(got[i]! - want[i]!));
  return gap;
}

/** The fixture under other names (and extra tensors), written to `name` in the temp dir. */
async function rewritten(
  name: string,
  rename: (key: string) => string | null,
  extra: Record<string, Tensor> = {},
): Promise<string> {
  const out: Record<string, Tensor> = { ...extra };
  for (const [key, t] of Object.entries(hf)) {
    const to = rename(key);
    if (to !== null) out[to] = t;
  }
  const path = join(dir, name);
  await saveSafetensors(path, out);
  return path;
}

describe('--init of a transformers GPT-2 checkpoint', () => {
  it('gives transformers logits to 1e-5 (Conv1D transposed, wpe cropped, gelu_new)', async () => {
    const model = freshModel();
    await loadInitialWeights(model, HF);
    expect(model.config.geluApproximate).toBe('tanh');
    const got = await logitsOf(model);
    expect(got.length).toBe(expected.length);
    console.log(`max |logit gap| ${maxGap(got, expected).toExponential(2)}`);
    expect(maxGap(got, expected)).toBeLessThan(1e-5);
    // The tied head is the file's wte, and wpe holds the first 16 of its 24 positions.
    const wte = await hf['transformer.wte.weight']!.read();
    expect(await model.lmHead.weight.read()).toEqual(wte);
    const wpe = await hf['transformer.wpe.weight']!.read();
    expect(await model.wpe.weight.read()).toEqual(wpe.subarray(0, 16 * 32));
    // nanoGPT's exact GELU on the same weights is off in the fourth digit: the switch matters.
    model.setGeluApproximate('none');
    expect(maxGap(await logitsOf(model), expected)).toBeGreaterThan(1e-4);
  });

  it("reads GPT2Model's names (the hub's files: no prefix, the attention's mask buffers, the head stored)", async () => {
    const mask = tensor(new Float32Array(24 * 24).fill(1), { backend, shape: [1, 1, 24, 24] });
    const masked = tensor([-1e4], { backend, shape: [] });
    const path = await rewritten('hub.safetensors', (key) => key.replace(/^transformer\./, ''), {
      'h.0.attn.bias': mask,
      'h.1.attn.bias': mask,
      'h.0.attn.masked_bias': masked,
      'lm_head.weight': hf['transformer.wte.weight']!,
    });
    const model = freshModel();
    await loadInitialWeights(model, path);
    expect(maxGap(await logitsOf(model), expected)).toBeLessThan(1e-5);
  });

  it('names the file and the first tensor that is missing, unexpected or of the wrong shape, and leaves the model as it was', async () => {
    const model = freshModel();
    const before = await model.wte.weight.read();
    const lacking = await rewritten('lacking.safetensors', (key) =>
      key === 'transformer.h.1.mlp.c_fc.bias' ? null : key,
    );
    await expect(loadInitialWeights(model, lacking)).rejects.toThrow(
      new UsageError(
        `--init ${lacking}: transformers' GPT-2 checkpoint, but it lacks transformer.h.1.mlp.c_fc.bias`,
        { option: '--init' },
      ),
    );
    await expect(loadInitialWeights(freshModel({ ...CONFIG, nLayer: 1 }), HF)).rejects.toThrow(
      new UsageError(
        `--init ${HF}: transformers' GPT-2 checkpoint, but the model (1 layers) has no tensor transformer.h.1.attn.c_attn.bias`,
        { option: '--init' },
      ),
    );
    await expect(loadInitialWeights(freshModel({ ...CONFIG, nEmbd: 16 }), HF)).rejects.toThrow(
      new UsageError(
        `--init ${HF}: transformers' GPT-2 checkpoint, but transformer.h.0.attn.c_attn.weight is [32, 96] where the model's Conv1D weight is [16, 48] ([in, out])`,
        { option: '--init' },
      ),
    );
    await expect(loadInitialWeights(freshModel({ ...CONFIG, blockSize: 32 }), HF)).rejects.toThrow(
      new UsageError(
        `--init ${HF}: transformers' GPT-2 checkpoint, but transformer.wpe.weight is [24, 32]: fewer positions than --block-size 32`,
        { option: '--init' },
      ),
    );
    await expect(loadInitialWeights(freshModel({ ...CONFIG, vocabSize: 128 }), HF)).rejects.toThrow(
      /does not fit the model: .*transformer\.wte\.weight/,
    );
    expect(await model.wte.weight.read()).toEqual(before);
    expect(model.config.geluApproximate).toBeUndefined();
  });

  it('fine-tunes from it in webshard-train, and --save writes a file that loads back with gelu_new', async () => {
    const tokens = Uint16Array.from({ length: 2000 }, (_, i) => (i * 37 + (i >> 2)) % 101);
    await writeFile(join(dir, 'tokens.bin'), tokens);
    const run = await runMain(
      [
        ...['--backend', 'cpu', '--n-layer', '2', '--n-head', '4', '--n-embd', '32'],
        ...['--block-size', '16', '--vocab-size', '101', '--batch-size', '4', '--steps', '2'],
        ...['--data', 'tokens.bin', '--init', HF, '--save', 'tuned.safetensors'],
        ...['--sample-length', '8', '--lr', '1e-4'],
      ],
      dir,
    );
    expect(run.stderr).toBe('');
    expect(run.exitCode).toBe(0);
    const tuned = run.summary!.model as GPT;
    expect(tuned.config.geluApproximate).toBe('tanh');
    const reloaded = freshModel();
    await loadInitialWeights(reloaded, join(dir, 'tuned.safetensors'));
    expect(reloaded.config.geluApproximate).toBe('tanh');
    // The weights come back bit for bit; the logits to the f32 tolerance, since the trainer's
    // backend runs the fused matmul ([Note: relaxed FMA, chosen once per job]) and this one not.
    const tunedParams = tuned.namedParameters();
    const reloadedParams = new Map(reloaded.namedParameters());
    for (const [name, p] of tunedParams) {
      expect(await reloadedParams.get(name)!.read(), name).toEqual(await p.read());
    }
    expect(maxGap(await logitsOf(reloaded), await logitsOf(tuned))).toBeLessThan(1e-5);
  });
});
