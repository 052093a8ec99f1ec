import { ArgumentError } from '@webshard/tensor-core';
import type { ProgressMode } from '../init-process-group.js';
import { STRESS_TRANSPORTS, type StressJob, type StressTransport } from './job.js';

/** What a stress run was asked for (the command line, or the CI test). */
export interface StressSettings {
  /** The first seed; each further world of a soak takes the next. */
  readonly seed: number;
  readonly transports: readonly StressTransport[];
  /** Ops per world. */
  readonly ops: number;
  /** World size; 0: each transport's default (4, two-level 2 nodes x 2). */
  readonly world: number;
  readonly maxBytes: number;
  readonly maxPauseMs: number;
  readonly maxInFlight: number;
  /** shm and two-level: big registered buffers first, so later ones land in segment 1. */
  readonly bigRegistered: boolean;
  /** Keep starting worlds (next seed each) until this many minutes have passed; 0: one round. */
  readonly minutes: number;
  /** Small sizes, short pauses, small arena slots: the CI test's settings. */
  readonly ci: boolean;
  /** tcp and ws ranks in this process rather than a process each (the default with `--ci`). */
  readonly inProcess: boolean;
  /** tcp and ws: where each rank's communication runs (`initProcessGroup`'s `progress`). */
  readonly progress: ProgressMode;
}

const SIZE = /^(\d+(?:\.\d+)?)\s*(b|kib|k|mib|m|gib|g)?$/i;

/** Bytes from `4`, `64KiB`, `256MiB`, `1GiB`. */
export function parseBytes(text: string): number {
  const match = SIZE.exec(text.trim());
  if (match === null) throw new ArgumentError('stress', `not a size: ${text}`);
  const unit = (match[2] ?? 'b').toLowerCase()[0]!;
  const scale = unit === 'k' ? 2 ** 10 : unit === 'm' ? 2 ** 20 : unit === 'g' ? 2 ** 30 : 1;
  return Math.round(Number(match[1]) * scale);
}

/** A new random seed (printed, so the run can be replayed). */
export function randomSeed(): number {
  return 1 + Math.floor(Math.random() * 2_000_000_000);
}

/** The settings from command-line arguments (and `WEBSHARD_STRESS_SEED`). */
export function parseStressArgs(argv: readonly string[], env = process.env): StressSettings {
  const values = new Map<string, string>();
  const flags = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) throw new ArgumentError('stress', `unexpected argument ${arg}`);
    const [name, inline] = arg.slice(2).split('=', 2) as [string, string | undefined];
    if (['ci', 'big-registered', 'in-process', 'processes'].includes(name)) flags.add(name);
    else if (inline !== undefined) values.set(name, inline);
    else if (i + 1 < argv.length) values.set(name, argv[++i]!);
    else throw new ArgumentError('stress', `--${name} needs a value`);
  }
  const known = [
    'seed',
    'transports',
    'ops',
    'world',
    'max-bytes',
    'max-sleep-ms',
    'in-flight',
    'minutes',
    'progress',
  ];
  for (const name of values.keys()) {
    if (!known.includes(name)) throw new ArgumentError('stress', `unknown option --${name}`);
  }
  const ci = flags.has('ci');
  const number = (name: string, fallback: number) => {
    const text = values.get(name);
    if (text === undefined) return fallback;
    const value = Number(text);
    if (!Number.isFinite(value) || value < 0)
      throw new ArgumentError('stress', `--${name} ${text}`);
    return value;
  };
  const seedText = values.get('seed') ?? env.WEBSHARD_STRESS_SEED;
  const transports = (values.get('transports') ?? STRESS_TRANSPORTS.join(','))
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '');
  for (const t of transports) {
    if (!(STRESS_TRANSPORTS as readonly string[]).includes(t)) {
      throw new ArgumentError('stress', `unknown transport ${t} (${STRESS_TRANSPORTS.join(', ')})`);
    }
  }
  const progress = values.get('progress') ?? 'thread';
  if (progress !== 'thread' && progress !== 'worker')
    throw new ArgumentError('stress', `--progress is thread or worker, not ${progress}`);
  const inFlight = number('in-flight', 4);
  if (inFlight < 1 || inFlight > 4) throw new ArgumentError('stress', '--in-flight is 1 to 4');
  return {
    seed: seedText === undefined ? randomSeed() : Number(seedText),
    transports: transports as StressTransport[],
    ops: number('ops', ci ? 300 : 120),
    world: number('world', 0),
    maxBytes: parseBytes(values.get('max-bytes') ?? (ci ? '64KiB' : '256MiB')),
    maxPauseMs: number('max-sleep-ms', ci ? 100 : 3000),
    maxInFlight: inFlight,
    bigRegistered: flags.has('big-registered'),
    minutes: number('minutes', 0),
    ci,
    inProcess: flags.has('in-process') || (ci && !flags.has('processes')),
    progress,
  };
}

/** The command line that replays `seed` on `transport` with these settings. */
export function replayCommand(settings: StressSettings, transport: string, seed: number): string {
  const args = [`--seed ${seed}`, `--transports ${transport}`];
  if (settings.ci) args.push('--ci');
  const defaults = parseStressArgs(settings.ci ? ['--ci'] : [], {});
  if (settings.ops !== defaults.ops) args.push(`--ops ${settings.ops}`);
  if (settings.world !== 0) args.push(`--world ${settings.world}`);
  if (settings.maxBytes !== defaults.maxBytes) args.push(`--max-bytes ${settings.maxBytes}`);
  if (settings.maxPauseMs !== defaults.maxPauseMs)
    args.push(`--max-sleep-ms ${settings.maxPauseMs}`);
  if (settings.maxInFlight !== 4) args.push(`--in-flight ${settings.maxInFlight}`);
  if (settings.bigRegistered) args.push('--big-registered');
  if (settings.inProcess !== defaults.inProcess)
    args.push(settings.inProcess ? '--in-process' : '--processes');
  if (settings.progress !== 'thread') args.push(`--progress ${settings.progress}`);
  return `pnpm --filter @webshard/collectives stress ${args.join(' ')}`;
}

/** The job of one world: `seed` on `transport` with these settings. */
export function stressJob(
  settings: StressSettings,
  transport: StressTransport,
  seed: number,
): StressJob {
  const worldSize = settings.world > 0 ? settings.world : 4;
  if (worldSize < 2 || worldSize > 8 || (transport === 'two-level' && worldSize % 2 !== 0)) {
    throw new ArgumentError('stress', `--world ${worldSize}: 2 to 8 ranks (two-level: even)`);
  }
  if (settings.progress === 'worker' && transport !== 'tcp' && transport !== 'ws') {
    throw new ArgumentError('stress', `--progress worker runs tcp and ws ranks, not ${transport}`);
  }
  const sharing = transport === 'two-level' ? worldSize / 2 : worldSize;
  const big = settings.bigRegistered && (transport === 'shm' || transport === 'two-level');
  return {
    transport,
    worldSize,
    seed,
    program: {
      ops: settings.ops,
      maxBytes: settings.maxBytes,
      maxPauseMs: settings.maxPauseMs,
      maxInFlight: settings.maxInFlight,
      subGroups: true,
      bigTail: big,
    },
    rank: {
      // The ranks sharing one arena together pass 2 GiB by a fifth: the last to allocate spill.
      ballastBytes: big ? Math.ceil((1.2 * 2 ** 31) / sharing / 65536) * 65536 : 0,
      matmulSize: settings.ci ? 288 : 320,
      timeoutMs: settings.ci ? 30_000 : 120_000,
    },
    slotBytes: settings.ci ? 4096 : 1 << 20,
    inProcess: settings.inProcess,
    progress: settings.progress,
  };
}
