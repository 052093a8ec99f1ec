import type { ElasticCoordinatorSettings, TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';
import { checkElasticPage } from './elastic-page-options.js';

/** The elastic flags' parser entries (see [Note: elastic training in the trainer]). */
export const ELASTIC_OPTIONS = {
  elastic: { type: 'string' },
  'elastic-coordinator': { type: 'string' },
  'min-world-size': { type: 'string' },
  'max-world-size': { type: 'string' },
  'elastic-wait-seconds': { type: 'string' },
  'member-timeout': { type: 'string' },
  'sync-timeout': { type: 'string' },
  'coordinator-state': { type: 'string' },
  'coordinator-timeout': { type: 'string' },
} as const;

/** The coordinator's own flags: an error names the first given without `--elastic-coordinator`. */
const COORDINATOR_FLAGS = [
  'min-world-size',
  'max-world-size',
  'elastic-wait-seconds',
  'member-timeout',
  'sync-timeout',
  'coordinator-state',
] as const;

function integer(
  name: string,
  value: string | undefined,
  fallback: number,
  min: number,
  max: number,
): number {
  if (value === undefined) return fallback;
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < min || parsed > max) {
    throw new UsageError(`--${name} ${value} is not an integer in ${min}..${max}`, {
      option: `--${name}`,
    });
  }
  return parsed;
}

/**
 * `--elastic URL` (train as one member of the elastic world at URL) and `--elastic-coordinator
 * PORT` with its bounds (host the world's coordinator), checked against the rest of `config`.
 * Returns the fields to set on it.
 */
export function elasticOptions(
  v: Record<string, string | undefined>,
  config: TrainConfig,
): Pick<TrainConfig, 'elastic' | 'elasticCoordinator' | 'transport' | 'coordinatorTimeoutSeconds'> {
  const flag = COORDINATOR_FLAGS.find((name) => v[name] !== undefined);
  if (v['elastic-coordinator'] === undefined && flag !== undefined) {
    throw new UsageError(`--${flag} applies to --elastic-coordinator`, { option: `--${flag}` });
  }
  if (v.elastic === undefined && v['coordinator-timeout'] !== undefined) {
    throw new UsageError('--coordinator-timeout applies to --elastic', {
      option: '--coordinator-timeout',
    });
  }
  let elasticCoordinator: ElasticCoordinatorSettings | null = null;
  if (v['elastic-coordinator'] !== undefined) {
    if (v.elastic !== undefined) {
      throw new UsageError('--elastic-coordinator hosts the world, --elastic joins it: give one', {
        option: '--elastic',
      });
    }
    const port = integer('elastic-coordinator', v['elastic-coordinator'], 0, 0, 65535);
    const minWorldSize = integer('min-world-size', v['min-world-size'], 1, 1, 64);
    const maxWorldSize = integer('max-world-size', v['max-world-size'], 64, 1, 64);
    if (maxWorldSize < minWorldSize) {
      throw new UsageError(
        `--max-world-size ${maxWorldSize} is below --min-world-size ${minWorldSize}`,
        { option: '--max-world-size' },
      );
    }
    const waitSeconds = integer('elastic-wait-seconds', v['elastic-wait-seconds'], 60, 0, 86400);
    const memberTimeoutSeconds = integer('member-timeout', v['member-timeout'], 60, 1, 86400);
    const syncTimeoutSeconds = integer('sync-timeout', v['sync-timeout'], 300, 1, 86400);
    const page = v['browser-port'] !== undefined;
    elasticCoordinator = {
      port,
      minWorldSize,
      maxWorldSize,
      waitSeconds,
      page,
      memberTimeoutSeconds,
      syncTimeoutSeconds,
      statePath: v['coordinator-state'] ?? null,
    };
    if (page) checkElasticPage(config);
  }
  const elastic = v.elastic ?? null;
  if (elastic !== null) {
    if (!/^wss?:\/\/[^/]+/.test(elastic)) {
      throw new UsageError(`--elastic ${elastic} is not the coordinator's ws:// URL`, {
        option: '--elastic',
      });
    }
    const refuse = (why: string, option: string) => {
      throw new UsageError(`--elastic ${why}`, { option });
    };
    if (config.strategy !== 'ddp' && config.strategy !== 'fsdp' && config.strategy !== 'diloco') {
      refuse(`trains with --strategy ddp, fsdp or diloco, not ${config.strategy}`, '--strategy');
    }
    if (config.precision !== 'fp32')
      refuse(`trains in fp32, not ${config.precision}`, '--precision');
    if (v['world-size'] !== undefined) {
      refuse('takes its world size from the coordinator: drop --world-size', '--world-size');
    }
    if (v.transport !== undefined && v.transport !== 'tcp' && v.transport !== 'ws') {
      refuse(`members are processes: --transport tcp or ws, not ${v.transport}`, '--transport');
    }
    if (config.resume !== null) {
      refuse(
        'takes the state from the live members or --checkpoint-dir: --resume does not apply',
        '--resume',
      );
    }
    if (config.strategy !== 'fsdp' && config.checkpointDir !== null) {
      refuse(
        `with --strategy ${config.strategy} moves the state between live members: --checkpoint-dir does not apply`,
        '--checkpoint-dir',
      );
    }
    if (config.strategy === 'fsdp' && config.checkpointDir === null) {
      refuse(
        'with --strategy fsdp restarts from its last sharded checkpoint after a change: give --checkpoint-dir and --checkpoint-every',
        '--strategy',
      );
    }
    if (config.evalEvery > 0)
      refuse('evaluates at the end only: drop --eval-every', '--eval-every');
  }
  const transport = elastic !== null && v.transport === undefined ? 'tcp' : config.transport;
  const coordinatorTimeoutSeconds = integer(
    'coordinator-timeout',
    v['coordinator-timeout'],
    300,
    1,
    86400,
  );
  return { elastic, elasticCoordinator, transport, coordinatorTimeoutSeconds };
}
