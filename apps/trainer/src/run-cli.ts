import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { ArgumentError, type Backend, createBackend } from '@webshard/tensor-core';
import { DEFAULT_CORPUS_PATH, loadCorpus } from './corpus.js';
import { type StepRecord, saveCheckpoint, sample, type TrainResult, trainGpt } from './train.js';

/** `webshard-train --help`. */
export const USAGE = `Usage: webshard-train [options]

Trains a small character-level GPT (nanoGPT's model) on a text, single process, and writes a
checkpoint (safetensors) and a sample.

Options:
  --backend <auto|cpu|webgpu>  compute backend (default auto: WebGPU on a hardware adapter, the
                               CPU backend when there is none or only a software one, SwiftShader,
                               where the CPU backend trains this model 2.6x faster)
  --steps <n>                  optimizer steps (default 200)
  --seed <n>                   seed of the initialization and the batches (default 1337)
  --batch-size <n>             sequences per step (default 16)
  --lr <x>                     peak learning rate (default 3e-3)
  --data <file>                training text (default: the shipped sonnets, ${DEFAULT_CORPUS_PATH})
  --out <dir>                  where model.safetensors and sample.txt go (default: out/ in the app)
  --sample-length <n>          characters to sample after training (default 200; 0 for none)
  --max-seconds <n>            stop training after the step that passes n seconds (default 100;
                               0 for no limit), so the default run ends in under 2 minutes
  --help                       this text
`;

/** Where output goes: stdout lines (tests capture them). */
export interface CliIO {
  log(line: string): void;
}

/** What `runCli` did, for tests and callers. */
export interface CliResult {
  result: TrainResult;
  backend: Backend;
  seconds: number;
  checkpoint: string;
  sample: string;
}

function positiveInteger(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) {
    throw new ArgumentError('webshard-train', `--${name} ${value} is not a positive integer`);
  }
  return n;
}

function nonNegativeInteger(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (value.trim() === '' || !Number.isSafeInteger(n) || n < 0) {
    throw new ArgumentError('webshard-train', `--${name} ${value} is not a non-negative integer`);
  }
  return n;
}

/** Adapters that are software rasterizers on the CPU (the WebGPU backend's own test, by name). */
const SOFTWARE_ADAPTER = /swiftshader|llvmpipe|lavapipe|warp|software/i;

/**
 * [Note: the trainer's default backend]
 * `auto` means WebGPU on a real GPU and the CPU backend otherwise. An adapter that is a software
 * rasterizer (SwiftShader, which Dawn finds on a machine without a GPU) counts as no GPU: on the
 * 2-core reference machine the CPU backend trains the default model (2 layers, 64 wide, 512 tokens
 * a step) 2.6x as fast as WebGPU on SwiftShader, 202 against 528 ms a step (`bench/backends.ts`
 * measures both in one run), and the two give the same losses. `--backend webgpu` forces WebGPU.
 */
async function chooseBackend(kind: 'auto' | 'cpu' | 'webgpu', io: CliIO): Promise<Backend> {
  const backend = await createBackend({ kind });
  if (kind === 'auto' && backend.kind === 'webgpu' && SOFTWARE_ADAPTER.test(backend.description)) {
    io.log(
      `the WebGPU adapter is a software one (${backend.description}): the CPU backend is faster for this model, using it (--backend webgpu to override)`,
    );
    backend.dispose();
    return createBackend({ kind: 'cpu' });
  }
  return backend;
}

/** One progress line: `step  12/200 | loss 3.1234 | lr 3.00e-3 | 5432 tok/s | 94.2 ms`. */
export function formatStep(record: StepRecord): string {
  const width = String(record.steps).length;
  return [
    `step ${String(record.step).padStart(width)}/${record.steps}`,
    `loss ${record.loss.toFixed(4)}`,
    `lr ${record.lr.toExponential(2)}`,
    `${Math.round(record.tokensPerSecond)} tok/s`,
    `${record.ms.toFixed(1)} ms`,
  ].join(' | ');
}

/** Parse `argv` (without node and the script), train, save, print. Returns `null` for `--help`. */
export async function runCli(
  argv: readonly string[],
  io: CliIO = { log: (line) => console.log(line) },
): Promise<CliResult | null> {
  const { values } = parseArgs({
    args: [...argv],
    strict: true,
    options: {
      backend: { type: 'string' },
      steps: { type: 'string' },
      seed: { type: 'string' },
      'batch-size': { type: 'string' },
      lr: { type: 'string' },
      data: { type: 'string' },
      out: { type: 'string' },
      'sample-length': { type: 'string' },
      'max-seconds': { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    io.log(USAGE);
    return null;
  }
  const kind = values.backend ?? 'auto';
  if (kind !== 'auto' && kind !== 'cpu' && kind !== 'webgpu') {
    throw new ArgumentError('webshard-train', `--backend ${kind} is not one of auto, cpu, webgpu`);
  }
  const steps = positiveInteger('steps', values.steps, 200);
  const seed = positiveInteger('seed', values.seed, 1337);
  const batchSize = positiveInteger('batch-size', values['batch-size'], 16);
  const lr = values.lr === undefined ? 3e-3 : Number(values.lr);
  if (!(lr > 0)) throw new ArgumentError('webshard-train', `--lr ${values.lr} is not positive`);
  const sampleLength = nonNegativeInteger('sample-length', values['sample-length'], 200);
  const maxSeconds = nonNegativeInteger('max-seconds', values['max-seconds'], 100);
  const out = values.out ?? join(dirname(DEFAULT_CORPUS_PATH), '..', 'out');

  const text = await loadCorpus(values.data);
  const backend = await chooseBackend(kind, io);
  io.log(`backend: ${backend.kind} (${backend.description})`);
  io.log(`corpus: ${values.data ?? DEFAULT_CORPUS_PATH} (${text.length} characters)`);
  const start = performance.now();
  const result = await trainGpt({
    backend,
    text,
    steps,
    seed,
    batchSize,
    lr,
    onStep: (record) => io.log(formatStep(record)),
    ...(maxSeconds > 0 ? { maxSeconds } : {}),
  });
  const seconds = (performance.now() - start) / 1000;
  const first = result.records[0]!.loss;
  const last = result.records.at(-1)!.loss;
  const trained = result.records.length;
  if (trained < steps) {
    io.log(
      `stopped after step ${trained} of ${steps}: the ${maxSeconds} s budget is spent (--max-seconds 0 trains every step)`,
    );
  }
  io.log(
    `trained ${trained} steps in ${seconds.toFixed(1)} s: loss ${first.toFixed(4)} -> ${last.toFixed(4)}, validation loss ${result.validationLoss.toFixed(4)} (${result.model.numParameters()} parameters)`,
  );
  await mkdir(out, { recursive: true });
  const checkpoint = join(out, 'model.safetensors');
  await saveCheckpoint(checkpoint, result, { steps: String(trained), seed: String(seed) });
  const sampled = await sample(result.model, result.tokenizer, { seed, length: sampleLength });
  await writeFile(join(out, 'sample.txt'), sampled);
  io.log(`checkpoint: ${checkpoint}`);
  io.log(`sample:\n${sampled}`);
  return { result, backend, seconds, checkpoint, sample: sampled };
}
