/**
 * Trainer benchmark: one training step of the default `pnpm train` model (forward, backward,
 * clip, AdamW) on the CPU backend and on WebGPU, in the same run, as the median after warm-up.
 * This is the measurement behind the CLI's default backend (see [Note: the trainer's default
 * backend]). Run: `pnpm --filter @webshard/trainer bench`.
 */
import { type BenchRow, timeMedian, writeBenchResults } from '@webshard/bench';
import { AdamW, type Backend, createBackend, RandomGenerator, tensor } from '@webshard/tensor-core';
import { loadCorpus } from '../src/corpus.js';
import { BatchSampler } from '../src/data/batches.js';
import { CharTokenizer } from '../src/data/char-tokenizer.js';
import { GPT } from '../src/models/gpt.js';
import { DEFAULT_MODEL } from '../src/train.js';
import { decayGroups, trainStep } from '../src/train-step.js';

const BATCH = 16;

async function stepMs(backend: Backend, text: string): Promise<number> {
  const tokenizer = CharTokenizer.fromText(text);
  const config = { ...DEFAULT_MODEL, vocabSize: tokenizer.vocabSize };
  const model = new GPT(config, { backend, generator: new RandomGenerator(1) });
  const params = model.parameters();
  const optimizer = new AdamW(decayGroups(model, 0.1), { lr: 3e-3, betas: [0.9, 0.95] });
  const sampler = new BatchSampler(tokenizer.encode(text), BATCH, config.blockSize, 1);
  return timeMedian(
    async () => {
      const batch = sampler.next();
      const shape = [BATCH, config.blockSize];
      const inputs = tensor(batch.inputs, { backend, dtype: 'i32', shape });
      const targets = tensor(batch.targets, { backend, dtype: 'i32', shape });
      await trainStep(
        params,
        optimizer,
        () => {
          const out = model.call(inputs, targets);
          out.logits.free();
          return out.loss!;
        },
        { clip: 1 },
      );
      inputs.free();
      targets.free();
    },
    { warmup: 3, iterations: 15, maxMs: 30_000 },
  );
}

const text = await loadCorpus();
const cpu = await stepMs(await createBackend({ kind: 'cpu' }), text);
const gpu = await stepMs(await createBackend({ kind: 'webgpu' }), text);
const tokens = BATCH * DEFAULT_MODEL.blockSize;
const rows: BenchRow[] = [
  {
    name: 'train step, default GPT',
    metric: 'webgpu step',
    value: gpu,
    unit: 'ms',
    peer: 'cpu backend',
    peerValue: cpu,
  },
  {
    name: 'train step, default GPT',
    metric: 'webgpu throughput',
    value: (tokens * 1000) / gpu,
    unit: 'tokens/s',
    peer: 'cpu backend',
    peerValue: (tokens * 1000) / cpu,
  },
];
writeBenchResults('trainer', rows);
process.exit(0);
