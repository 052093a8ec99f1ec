import { isAbsolute, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { TOKENIZERS, type TokenizerName } from '../data/dataset.js';
import { UsageError } from '../errors.js';
import { type Sharding, parseSharding } from '../strategy/sharding.js';
import { checkBrowserRanks } from './browser-rank-options.js';

/** The strategies `--strategy` accepts. */
export const STRATEGIES = ['single', 'ddp', 'fsdp', 'offload'] as const;
export type Strategy = (typeof STRATEGIES)[number];

/** Where the ranks run: this thread, worker threads, or processes (see [Note: how ranks start]). */
export const TRANSPORTS = ['local', 'shm', 'tcp', 'ws'] as const;
export type TransportName = (typeof TRANSPORTS)[number];

/**
 * Everything one run needs, as plain values (nanoGPT's configuration style). Paths are absolute,
 * resolved against the directory the user ran the command in. `null` means "not given".
 */
export interface TrainConfig {
  strategy: Strategy;
  /** Ranks that share the batch. */
  worldSize: number;
  transport: TransportName;
  /** Ranks `worldSize - browserRanks ..` are browser tabs (ws only; see ranks/browser-ranks.ts). */
  browserRanks: number;
  /** Port of the page that adds a tab as a rank (0: a free one). */
  browserPort: number;
  /**
   * The address tabs reach this machine at: the page, the store and the Node ranks listen there
   * and advertise it (default `127.0.0.1`: tabs of this machine only).
   */
  browserHost: string;
  /** FSDP: free each unit's full parameters after forward (fairscale's default). */
  reshardAfterForward: boolean;
  /** FSDP: PyTorch's sharding strategy (`--sharding`; see strategy/sharding.ts). */
  sharding: Sharding;
  /** FSDP: one unit per transformer block (`block`), or the root only (`none`). */
  autoWrap: 'block' | 'none';
  /** DDP: bucket size; FSDP: the reduce-scatter bucket (MiB). Null: the package's default. */
  bucketMb: number | null;
  /** FSDP: keep the shards (and the optimizer step) on the CPU, compute on the device. */
  moveParamsToCpu: boolean;
  /** Offload: slices the model streams through the device in. */
  numSlices: number;
  /** Offload: chunks of the batch each slice runs on while it is on the device. */
  numMicrobatches: number;
  /** Offload: keep only slice inputs between forward and backward, recompute the rest. */
  checkpointActivation: boolean;
  /** Write a checkpoint every this many steps into `checkpointDir` (0: never). */
  checkpointEvery: number;
  checkpointDir: string | null;
  /** A checkpoint directory (or its root, holding `latest`) to continue from. */
  resume: string | null;
  /** Replace another run's checkpoints in `checkpointDir` (else such a directory is refused). */
  overwriteCheckpoints: boolean;
  model: 'gpt' | 'mlp';
  nLayer: number;
  nHead: number;
  nEmbd: number;
  blockSize: number;
  /** From the data when null. */
  vocabSize: number | null;
  data: string | null;
  /** How text data becomes tokens, and samples text: see [Note: the GPT-2 tokenizer]. */
  tokenizer: TokenizerName;
  /** Global sequences per step, over all ranks and micro-batches. */
  batchSize: number;
  gradAccum: number;
  init: string | null;
  seed: number;
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  gradClip: number;
  steps: number;
  lrSchedule: 'constant' | 'cosine';
  warmupSteps: number;
  precision: 'fp32' | 'fp16' | 'bf16';
  backend: 'auto' | 'cpu' | 'webgpu';
  memoryLimit: number | null;
  maxSeconds: number;
  logJsonl: string | null;
  save: string | null;
  samples: string | null;
  report: string | null;
  evalEvery: number;
  sampleLength: number;
}

/** `webshard-train --help`. */
export const USAGE = `Usage: webshard-train [options]

Trains a GPT (nanoGPT's model and key names) or a small MLP on the CPU or WebGPU, in one process
or on --world-size ranks with DDP or FSDP.
Relative paths are read against the directory you ran the command in.

Model
  --model <gpt|mlp>            gpt (default) or a two-layer MLP on seeded synthetic data
  --n-layer <n> --n-head <n> --n-embd <n> --block-size <n>
                               GPT shape (default 2, 4, 64, 32); --n-embd is the MLP's hidden width
  --vocab-size <n>             default: the data's (at least that)
  --init <file.safetensors>    initial weights by PyTorch names (the tied weight may be stored
                               once, as transformer.wte.weight), or a transformers GPT-2
                               checkpoint (Conv1D layout); default: nanoGPT's seeded init
  --seed <n>                   initialization and sampling seed, 0 included (default 1337)
Data
  --data <file>                a .bin of uint16 tokens (nanoGPT's format), or any other file as
                               UTF-8 characters (bytes when it is not UTF-8); default: the sonnets
  --tokenizer <char|gpt2>      char (default): a text's characters are its tokens; gpt2: GPT-2's
                               BPE (50257 tokens; pad with --vocab-size 50304 as nanoGPT), and a
                               .bin's tokens are GPT-2's (nanoGPT's prepare.py), decoded in samples
  --batch-size <n>             global sequences per step (default 16)
  --grad-accum <k>             micro-batches per step (default 1); the batch must divide by it
Optimizer
  --steps <n>                  optimizer steps (default 200)
  --lr <x> --beta1 <x> --beta2 <x> --eps <x> --weight-decay <x>
                               AdamW (default 3e-3, 0.9, 0.95, 1e-8, 0.1; decay on tensors of 2 or
                               more dimensions only)
  --grad-clip <x>              clip the global gradient norm (default 1; 0 for none)
  --lr-schedule <constant|cosine>  default constant; cosine: linear warm-up, decay to lr/10
  --warmup-steps <n>           warm-up steps of the cosine schedule (default 0)
Execution
  --strategy <single|ddp|fsdp|offload>  default single; ddp: every rank holds the model and
                               gradients are all-reduced in buckets; fsdp: parameters, gradients and
                               optimizer state sharded over the ranks; offload: the model lives on
                               the host and streams through the device slice by slice
  --world-size <n>             ranks sharing each batch (default 1; the batch must divide by it)
  --transport <local|shm|tcp|ws>  how ranks run: local (one thread), shm (worker threads, the
                               default), tcp or ws (processes, started through webshard-run)
  --browser-ranks <k>          ddp, fsdp over ws: the last k ranks are browser tabs; prints the
                               page to open in each, and waits for them (default 0)
  --browser-port <port>        where that page is served (default: a free port)
  --browser-host <address>     the address tabs reach this machine at: the page, the store and
                               the Node ranks listen there (default 127.0.0.1: tabs on this
                               machine only; another address lets other machines join, with the
                               token; set WEBSHARD_TLS_CERT and WEBSHARD_TLS_KEY for https/wss)
  --bucket-mb <x>              ddp: gradient bucket size; fsdp: reduce-scatter bucket (MiB)
  --reshard-after-forward <true|false>  fsdp: free full parameters after forward (default true)
  --sharding <full|grad-op|hybrid|none>  fsdp: PyTorch's FULL_SHARD (default), SHARD_GRAD_OP
                               (full parameters kept from forward to backward), HYBRID_SHARD (shard
                               inside a node, replicate across nodes: for several machines, with
                               webshard-run --nnodes) or NO_SHARD (replicated, as ddp)
  --auto-wrap <block|none>     fsdp: one unit per transformer block (default) or the root only
  --move-params-to-cpu         fsdp: shards and optimizer on the CPU, compute on --backend
  --num-slices <n>             offload: slices the model streams in (default 3)
  --num-microbatches <n>       offload: batch chunks per slice visit (default 1)
  --checkpoint-activation      offload: recompute each slice in backward from its input
  --precision <fp32|fp16|bf16> compute precision (16 bits keep f32 masters; default fp32)
  --backend <auto|cpu|webgpu>  default auto: whichever trains this model faster in a short probe
  --memory-limit <bytes>       emulated device memory (the caching allocator's limit)
  --max-seconds <n>            stop after the step that passes n seconds (default 0: no limit)
Output
  --log-jsonl <file>           one JSON line per step: step, loss, lr, tokensPerSecond, peakDeviceBytes, peakExternalBytes, peakHostBytes
  --save <file.safetensors>    the final state dict under PyTorch names
  --samples <file>             the final sample's text
  --report <file.html>         one self-contained page: loss curves, tokens/s, peak memory
  --checkpoint-every <n> --checkpoint-dir <dir>
                               a checkpoint every n steps (fsdp: sharded, loads at any world size)
  --resume <dir>               continue a run from its checkpoint (dir/latest, or a step directory)
  --overwrite-checkpoints      let --checkpoint-dir replace another run's checkpoints there
  --eval-every <n>             held-out loss and a short sample every n steps (default 0: at the end only)
  --sample-length <n>          tokens sampled at the end (default 200; 0 for none)
  --help                       this text
`;

const OPTIONS = {
  strategy: { type: 'string' },
  'world-size': { type: 'string' },
  transport: { type: 'string' },
  'browser-ranks': { type: 'string' },
  'browser-port': { type: 'string' },
  'browser-host': { type: 'string' },
  'bucket-mb': { type: 'string' },
  'reshard-after-forward': { type: 'string' },
  sharding: { type: 'string' },
  'auto-wrap': { type: 'string' },
  'move-params-to-cpu': { type: 'boolean' },
  'num-slices': { type: 'string' },
  'num-microbatches': { type: 'string' },
  'checkpoint-activation': { type: 'boolean' },
  'checkpoint-every': { type: 'string' },
  'checkpoint-dir': { type: 'string' },
  resume: { type: 'string' },
  'overwrite-checkpoints': { type: 'boolean' },
  model: { type: 'string' },
  'n-layer': { type: 'string' },
  'n-head': { type: 'string' },
  'n-embd': { type: 'string' },
  'block-size': { type: 'string' },
  'vocab-size': { type: 'string' },
  data: { type: 'string' },
  tokenizer: { type: 'string' },
  'batch-size': { type: 'string' },
  'grad-accum': { type: 'string' },
  init: { type: 'string' },
  seed: { type: 'string' },
  lr: { type: 'string' },
  beta1: { type: 'string' },
  beta2: { type: 'string' },
  eps: { type: 'string' },
  'weight-decay': { type: 'string' },
  'grad-clip': { type: 'string' },
  steps: { type: 'string' },
  'lr-schedule': { type: 'string' },
  'warmup-steps': { type: 'string' },
  precision: { type: 'string' },
  backend: { type: 'string' },
  'memory-limit': { type: 'string' },
  'max-seconds': { type: 'string' },
  'log-jsonl': { type: 'string' },
  save: { type: 'string' },
  samples: { type: 'string' },
  report: { type: 'string' },
  'eval-every': { type: 'string' },
  'sample-length': { type: 'string' },
  help: { type: 'boolean' },
} as const;

/** A number option: finite, within [min, max], an integer when asked. */
function numberOption(
  name: string,
  value: string | undefined,
  fallback: number,
  range: { min: number; max?: number; integer?: boolean; minExclusive?: boolean },
): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  const option = `--${name}`;
  if (value.trim() === '' || !Number.isFinite(n)) {
    throw new UsageError(`${option} ${value} is not a finite number`, { option });
  }
  if (range.integer && !Number.isSafeInteger(n)) {
    throw new UsageError(`${option} ${value} is not an integer`, { option });
  }
  const max = range.max ?? Number.POSITIVE_INFINITY;
  const belowMin = range.minExclusive ? n <= range.min : n < range.min;
  if (belowMin || n > max) {
    const low = range.minExclusive ? `(${range.min}` : `[${range.min}`;
    const high = Number.isFinite(max) ? `${max}]` : 'inf)';
    throw new UsageError(`${option} ${value} is out of range ${low}, ${high}`, { option });
  }
  return n;
}

function choice<T extends string>(
  name: string,
  value: string | undefined,
  choices: readonly T[],
  fallback: T,
): T {
  if (value === undefined) return fallback;
  if (!(choices as readonly string[]).includes(value)) {
    throw new UsageError(`--${name} ${value} is not one of ${choices.join(', ')}`, {
      option: `--${name}`,
    });
  }
  return value as T;
}

/**
 * Parse `argv` (without node and the script) into a `TrainConfig`, or `'help'`. A bare `--`
 * (what `pnpm run x -- --flag` passes through, after the script's own flags) is dropped: the
 * command takes no positional arguments, so it never ends the options. Every value is checked here, before
 * any file is read: a bad one is a `UsageError` naming the flag.
 */
export function parseOptions(argv: readonly string[], cwd: string): TrainConfig | 'help' {
  const args = argv.filter((arg) => arg !== '--');
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args, strict: true, allowPositionals: false, options: OPTIONS }));
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error), { cause: error });
  }
  if (values.help) return 'help';
  const v = values as Record<string, string | undefined>;
  const strategy = choice('strategy', v.strategy, STRATEGIES, 'single');
  const worldSize = numberOption('world-size', v['world-size'], 1, {
    min: 1,
    max: 64,
    integer: true,
  });
  if ((strategy === 'single' || strategy === 'offload') && worldSize > 1) {
    throw new UsageError(
      `--strategy ${strategy} trains one rank: --world-size ${worldSize} needs --strategy ddp or fsdp`,
      { option: '--world-size' },
    );
  }
  const path = (name: string): string | null => {
    const value = v[name];
    if (value === undefined) return null;
    if (value === '') throw new UsageError(`--${name} is an empty path`, { option: `--${name}` });
    return isAbsolute(value) ? value : resolve(cwd, value);
  };
  const int = (name: string, fallback: number, min = 1, max?: number) =>
    numberOption(name, v[name], fallback, {
      min,
      integer: true,
      ...(max === undefined ? {} : { max }),
    });
  const config: TrainConfig = {
    strategy,
    worldSize,
    model: choice('model', v.model, ['gpt', 'mlp'] as const, 'gpt'),
    nLayer: int('n-layer', 2),
    nHead: int('n-head', 4),
    nEmbd: int('n-embd', 64),
    blockSize: int('block-size', 32),
    vocabSize: v['vocab-size'] === undefined ? null : int('vocab-size', 0, 1, 65536),
    data: path('data'),
    tokenizer: choice('tokenizer', v.tokenizer, TOKENIZERS, 'char'),
    batchSize: int('batch-size', 16),
    gradAccum: int('grad-accum', 1),
    init: path('init'),
    seed: int('seed', 1337, 0, 2 ** 32 - 1),
    lr: numberOption('lr', v.lr, 3e-3, { min: 0, minExclusive: true, max: 10 }),
    beta1: numberOption('beta1', v.beta1, 0.9, { min: 0, max: 0.999999 }),
    beta2: numberOption('beta2', v.beta2, 0.95, { min: 0, max: 0.999999 }),
    eps: numberOption('eps', v.eps, 1e-8, { min: 0, minExclusive: true, max: 1 }),
    weightDecay: numberOption('weight-decay', v['weight-decay'], 0.1, { min: 0, max: 1 }),
    gradClip: numberOption('grad-clip', v['grad-clip'], 1, { min: 0 }),
    steps: int('steps', 200),
    lrSchedule: choice(
      'lr-schedule',
      v['lr-schedule'],
      ['constant', 'cosine'] as const,
      'constant',
    ),
    warmupSteps: int('warmup-steps', 0, 0),
    precision: choice('precision', v.precision, ['fp32', 'fp16', 'bf16'] as const, 'fp32'),
    backend: choice('backend', v.backend, ['auto', 'cpu', 'webgpu'] as const, 'auto'),
    memoryLimit: v['memory-limit'] === undefined ? null : int('memory-limit', 0, 1),
    maxSeconds: int('max-seconds', 0, 0),
    logJsonl: path('log-jsonl'),
    save: path('save'),
    samples: path('samples'),
    report: path('report'),
    evalEvery: int('eval-every', 0, 0),
    sampleLength: int('sample-length', 200, 0),
    transport: choice('transport', v.transport, TRANSPORTS, 'shm'),
    browserRanks: int('browser-ranks', 0, 0, 63),
    browserPort: int('browser-port', 0, 0, 65535),
    browserHost: v['browser-host'] ?? '127.0.0.1',
    ...parseSharding(v.sharding, v['reshard-after-forward']),
    autoWrap: choice('auto-wrap', v['auto-wrap'], ['block', 'none'] as const, 'block'),
    bucketMb:
      v['bucket-mb'] === undefined
        ? null
        : numberOption('bucket-mb', v['bucket-mb'], 0, { min: 0, minExclusive: true, max: 4096 }),
    moveParamsToCpu: values['move-params-to-cpu'] === true,
    numSlices: int('num-slices', 3),
    numMicrobatches: int('num-microbatches', 1),
    checkpointActivation: values['checkpoint-activation'] === true,
    checkpointEvery: int('checkpoint-every', 0, 0),
    checkpointDir: path('checkpoint-dir'),
    resume: path('resume'),
    overwriteCheckpoints: values['overwrite-checkpoints'] === true,
  };
  if (config.checkpointEvery > 0 !== (config.checkpointDir !== null)) {
    throw new UsageError('--checkpoint-every and --checkpoint-dir go together', {
      option: config.checkpointDir === null ? '--checkpoint-every' : '--checkpoint-dir',
    });
  }
  if (config.overwriteCheckpoints && config.checkpointDir === null) {
    throw new UsageError('--overwrite-checkpoints needs --checkpoint-dir', {
      option: '--overwrite-checkpoints',
    });
  }
  checkStrategyFlags(config, values);
  checkBrowserRanks(config);
  if (config.warmupSteps > 0 && config.lrSchedule !== 'cosine') {
    throw new UsageError('--warmup-steps needs --lr-schedule cosine', { option: '--warmup-steps' });
  }
  if (config.model === 'gpt' && config.nEmbd % config.nHead !== 0) {
    throw new UsageError(`--n-embd ${config.nEmbd} is not divisible by --n-head ${config.nHead}`, {
      option: '--n-embd',
    });
  }
  if (config.model === 'mlp' && config.data !== null) {
    throw new UsageError(
      '--model mlp trains on synthetic data from --seed: --data does not apply',
      {
        option: '--data',
      },
    );
  }
  checkBatchDivides(config);
  return config;
}

/** The batch must split evenly over the ranks and their micro-batches. */
export function checkBatchDivides(config: TrainConfig): void {
  const ranksTimesMicro = config.worldSize * config.gradAccum;
  if (config.batchSize % ranksTimesMicro !== 0) {
    throw new UsageError(
      `--batch-size ${config.batchSize} is not divisible by the world size ${config.worldSize} times --grad-accum ${config.gradAccum}`,
      { option: '--batch-size' },
    );
  }
}

const FSDP_FLAGS = [
  'reshard-after-forward',
  'sharding',
  'auto-wrap',
  'move-params-to-cpu',
] as const;
const OFFLOAD_FLAGS = ['num-slices', 'num-microbatches', 'checkpoint-activation'] as const;

/** Flags of one strategy given to another, and what no transport can do, refused by name. */
function checkStrategyFlags(
  config: TrainConfig,
  values: Record<string, string | boolean | undefined>,
): void {
  for (const flag of FSDP_FLAGS) {
    if (values[flag] !== undefined && config.strategy !== 'fsdp') {
      throw new UsageError(`--${flag} applies to --strategy fsdp, not ${config.strategy}`, {
        option: `--${flag}`,
      });
    }
  }
  for (const flag of OFFLOAD_FLAGS) {
    if (values[flag] !== undefined && config.strategy !== 'offload') {
      throw new UsageError(`--${flag} applies to --strategy offload, not ${config.strategy}`, {
        option: `--${flag}`,
      });
    }
  }
  const oneRank = config.strategy === 'single' || config.strategy === 'offload';
  if (config.bucketMb !== null && oneRank) {
    throw new UsageError(`--bucket-mb applies to --strategy ddp or fsdp, not ${config.strategy}`, {
      option: '--bucket-mb',
    });
  }
  if (values.transport !== undefined && oneRank) {
    throw new UsageError(`--transport applies to --strategy ddp or fsdp, not ${config.strategy}`, {
      option: '--transport',
    });
  }
  if (config.strategy === 'offload' && config.precision !== 'fp32') {
    throw new UsageError(
      `--precision ${config.precision} is not available with --strategy offload: it trains in fp32`,
      { option: '--precision' },
    );
  }
}
