import { FsdpConfigError } from './errors.js';

/** Every option `FsdpOptions` has, in the order of its declaration. */
export const OPTION_NAMES = [
  'group',
  'shardingStrategy',
  'nodeSize',
  'processGroupReduceScatter',
  'worldSize',
  'flattenParameters',
  'reshardAfterForward',
  'disableReshardOnRoot',
  'mixedPrecision',
  'computeDtype',
  'bufferDtype',
  'fp32ReduceScatter',
  'gradientPredivideFactor',
  'bucketCapMb',
  'moveParamsToCpu',
  'moveGradsToCpu',
  'ssdOffload',
  'forceInputToFp32',
  'clearAutocastCache',
  'limitAllGathers',
  'computeBackend',
  'verbose',
  'allowResetParameters',
  'cpuOffload',
] as const;

const KNOWN = new Set<string>(OPTION_NAMES);

/** Deprecated names and the option they stand for (fairscale's `cpu_offload`). */
const ALIASES: Readonly<Record<string, string>> = { cpuOffload: 'moveParamsToCpu' };

/** `cpu_offload` -> `cpuOffload`. */
function camelCase(name: string): string {
  return name.replace(/_+([a-z0-9])/gi, (_, c: string) => c.toUpperCase());
}

/** Levenshtein distance, case-insensitive. */
function distance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  let previous = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const row = [i];
    for (let j = 1; j <= y.length; j++) {
      const cost = x[i - 1] === y[j - 1] ? 0 : 1;
      row.push(Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + cost));
    }
    previous = row;
  }
  return previous[y.length]!;
}

/** The known option nearest to `name` (its camelCase form first; an alias gives its target). */
export function nearestOption(name: string): string {
  const camel = camelCase(name);
  if (KNOWN.has(camel)) return ALIASES[camel] ?? camel;
  let best: string = OPTION_NAMES[0];
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const known of OPTION_NAMES) {
    const d = distance(camel, known);
    if (d < bestDistance) {
      best = known;
      bestDistance = d;
    }
  }
  return ALIASES[best] ?? best;
}

let warnedCpuOffload = false;

/** Warn once per process (Node's `process.emitWarning`, else `console.warn`). */
function warnOnce(message: string): void {
  if (warnedCpuOffload) return;
  warnedCpuOffload = true;
  const proc = (globalThis as { process?: { emitWarning?: (m: string, o: object) => void } })
    .process;
  if (typeof proc?.emitWarning === 'function') {
    proc.emitWarning(message, { type: 'DeprecationWarning', code: 'WEBSHARD_FSDP_CPU_OFFLOAD' });
  } else {
    console.warn(`DeprecationWarning: ${message}`);
  }
}

/**
 * Check the option names of `options` before anything else: an unknown name is a
 * `FsdpConfigError` naming the nearest known option (fairscale's snake_case names give their
 * camelCase form), so a misspelling does not silently fall back to a default. `cpuOffload` is the
 * deprecated alias of `moveParamsToCpu` (fairscale's `cpu_offload`): accepted with a warning, once
 * per process; both given with different values is an error. Returns `moveParamsToCpu` as the two
 * decide it.
 */
export function checkOptionNames(op: string, options: object): boolean | undefined {
  for (const name of Object.keys(options)) {
    if (KNOWN.has(name)) continue;
    throw new FsdpConfigError(
      op,
      `unknown option '${name}': did you mean '${nearestOption(name)}'?`,
    );
  }
  const { cpuOffload, moveParamsToCpu } = options as {
    cpuOffload?: boolean;
    moveParamsToCpu?: boolean;
  };
  if (cpuOffload === undefined) return moveParamsToCpu;
  if (moveParamsToCpu !== undefined && moveParamsToCpu !== cpuOffload) {
    throw new FsdpConfigError(
      op,
      `cpuOffload (${cpuOffload}) is the deprecated name of moveParamsToCpu (${moveParamsToCpu}): give only moveParamsToCpu`,
    );
  }
  warnOnce("FullyShardedDataParallel's cpuOffload is deprecated: use moveParamsToCpu");
  return cpuOffload;
}

/** Forget that the deprecation warning was given (tests). */
export function resetOptionWarnings(): void {
  warnedCpuOffload = false;
}
