import { ELASTIC_OPTIONS, elasticOptions } from './elastic-options.js';
import { PROGRESS_OPTIONS, progressOptions } from './progress-options.js';
import { TLS_OPTIONS, tlsOptions } from './tls-options.js';
import { isAbsolute, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { TOKENIZERS } from '../data/dataset.js';
import {
  DEFAULT_STREAM_MIXING,
  DEFAULT_TOPK_DENSITY,
  DEFAULT_TOPK_LEVELS,
  FRAGMENT_MERGES,
  OUTER_COMPRESSIONS,
  TOPK_LEVELS,
} from '@webshard/diloco';
import { checkBatchDivides, STRATEGIES, type TrainConfig, TRANSPORTS } from '../config.js';
import { UsageError } from '../errors.js';
import { parseSharding } from '../strategy/sharding.js';
import { checkBrowserRanks } from './browser-rank-options.js';
import { checkStrategyFlags, defaultCaptureStep } from './strategy-flags.js';

const OPTIONS = {
  strategy: { type: 'string' },
  'world-size': { type: 'string' },
  transport: { type: 'string' },
  'browser-ranks': { type: 'string' },
  'browser-port': { type: 'string' },
  'browser-host': { type: 'string' },
  'bucket-mb': { type: 'string' },
  'ddp-allreduce': { type: 'string' },
  'reshard-after-forward': { type: 'string' },
  prefetch: { type: 'string' },
  sharding: { type: 'string' },
  'auto-wrap': { type: 'string' },
  'move-params-to-cpu': { type: 'boolean' },
  'num-slices': { type: 'string' },
  'num-microbatches': { type: 'string' },
  'checkpoint-activation': { type: 'boolean' },
  'capture-step': { type: 'boolean' },
  'no-capture-step': { type: 'boolean' },
  'inner-steps': { type: 'string' },
  'outer-lr': { type: 'string' },
  'outer-momentum': { type: 'string' },
  'outer-compression': { type: 'string' },
  'outer-density': { type: 'string' },
  'outer-fragments': { type: 'string' },
  'outer-overlap': { type: 'string' },
  'outer-merge': { type: 'string' },
  'outer-mixing': { type: 'string' },
  'outer-error-decay': { type: 'string' },
  'outer-levels': { type: 'string' },
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
  'matmul-fma': { type: 'string' },
  'max-seconds': { type: 'string' },
  'log-jsonl': { type: 'string' },
  save: { type: 'string' },
  samples: { type: 'string' },
  report: { type: 'string' },
  'eval-every': { type: 'string' },
  'sample-length': { type: 'string' },
  help: { type: 'boolean' },
  ...ELASTIC_OPTIONS,
  ...TLS_OPTIONS,
  ...PROGRESS_OPTIONS,
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
      `--strategy ${strategy} trains one rank: --world-size ${worldSize} needs --strategy ddp, fsdp or diloco`,
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
  const outerCompression = choice(
    'outer-compression',
    v['outer-compression'],
    OUTER_COMPRESSIONS,
    'f32',
  );
  // SparseLoCo's outer step for topk: its decayed error feedback is the momentum (@webshard/diloco).
  const topk = outerCompression === 'topk';
  const outerOverlap = numberOption('outer-overlap', v['outer-overlap'], 0, {
    min: 0,
    integer: true,
  });
  // How a fragment lands after an overlap: topk carries the steps since the issue, unless a
  // mixing asks for the paper's merge ([Note: merging a landed fragment] in @webshard/diloco).
  const outerMerge = choice(
    'outer-merge',
    v['outer-merge'],
    FRAGMENT_MERGES,
    topk && v['outer-mixing'] === undefined ? 'carry' : 'mix',
  );
  if (outerMerge === 'carry' && v['outer-mixing'] !== undefined) {
    throw new UsageError('--outer-mixing is the alpha of --outer-merge mix, not carry', {
      option: '--outer-mixing',
    });
  }
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
    matmulFma: choice('matmul-fma', v['matmul-fma'], ['auto', 'off'] as const, 'auto'),
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
    prefetch: int('prefetch', 1, 0, 64),
    ddpAllreduce: choice(
      'ddp-allreduce',
      v['ddp-allreduce'],
      ['auto', 'overlap', 'delay'] as const,
      'auto',
    ),
    bucketMb:
      v['bucket-mb'] === undefined
        ? null
        : numberOption('bucket-mb', v['bucket-mb'], 0, { min: 0, minExclusive: true, max: 4096 }),
    moveParamsToCpu: values['move-params-to-cpu'] === true,
    numSlices: int('num-slices', 3),
    numMicrobatches: int('num-microbatches', 1),
    checkpointActivation: values['checkpoint-activation'] === true,
    captureStep:
      values['capture-step'] === true ? true : values['no-capture-step'] === true ? false : 'auto',
    innerSteps: int('inner-steps', 50),
    outerLr: numberOption('outer-lr', v['outer-lr'], topk ? 1 : 0.7, {
      min: 0,
      minExclusive: true,
      max: 10,
    }),
    outerMomentum: numberOption('outer-momentum', v['outer-momentum'], topk ? 0 : 0.9, {
      min: 0,
      max: 0.999999,
    }),
    outerCompression,
    outerDensity: numberOption('outer-density', v['outer-density'], DEFAULT_TOPK_DENSITY, {
      min: 0,
      minExclusive: true,
      max: 1,
    }),
    outerFragments: int('outer-fragments', 1),
    outerOverlap,
    outerMerge,
    // Streaming DiLoCo's mixing: the paper's 0.5 with an overlap; 0 (DiLoCo's replacement) without
    // ([Note: merging a landed fragment] in @webshard/diloco).
    outerMixing: numberOption(
      'outer-mixing',
      v['outer-mixing'],
      outerOverlap > 0 && outerMerge === 'mix' ? DEFAULT_STREAM_MIXING : 0,
      { min: 0, max: 0.999999 },
    ),
    outerLevels: choice('outer-levels', v['outer-levels'], TOPK_LEVELS, DEFAULT_TOPK_LEVELS),
    outerErrorDecay:
      v['outer-error-decay'] === undefined
        ? null
        : numberOption('outer-error-decay', v['outer-error-decay'], 1, { min: 0, max: 1 }),
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
  Object.assign(config, elasticOptions(v, config));
  Object.assign(config, tlsOptions(values, config));
  Object.assign(config, progressOptions(values, config));
  checkStrategyFlags(config, values);
  Object.assign(config, defaultCaptureStep(config));
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
