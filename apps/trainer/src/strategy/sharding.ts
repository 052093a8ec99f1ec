import type { FsdpOptions } from '@webshard/fsdp';
import { UsageError } from '../errors.js';

/** What `--sharding` accepts (PyTorch's names too: `FULL_SHARD`, `SHARD_GRAD_OP`, ...). */
export const SHARDINGS = ['full', 'grad-op', 'hybrid', 'none'] as const;
export type Sharding = (typeof SHARDINGS)[number];

const PYTORCH_NAMES: Readonly<Record<string, Sharding>> = {
  FULL_SHARD: 'full',
  SHARD_GRAD_OP: 'grad-op',
  HYBRID_SHARD: 'hybrid',
  NO_SHARD: 'none',
};

const STRATEGY: Readonly<Record<Sharding, NonNullable<FsdpOptions['shardingStrategy']>>> = {
  full: 'FULL_SHARD',
  'grad-op': 'SHARD_GRAD_OP',
  hybrid: 'HYBRID_SHARD',
  none: 'NO_SHARD',
};

/**
 * `--sharding` and `--reshard-after-forward` as one decision: the sharding (default `full`, or
 * `grad-op` for `--reshard-after-forward false` alone) and whether full parameters are freed after
 * forward (default: not with `grad-op`). A pair that
 * contradicts itself (`grad-op` with `true`, `full` with `false`, `none` with either) is a
 * `UsageError` naming both flags.
 */
export function parseSharding(
  sharding: string | undefined,
  reshard: string | undefined,
): { sharding: Sharding; reshardAfterForward: boolean } {
  const name = sharding === undefined ? 'full' : (PYTORCH_NAMES[sharding] ?? sharding);
  if (!(SHARDINGS as readonly string[]).includes(name)) {
    throw new UsageError(
      `--sharding ${sharding} is not one of ${SHARDINGS.join(', ')} (or ${Object.keys(PYTORCH_NAMES).join(', ')})`,
      { option: '--sharding' },
    );
  }
  if (reshard !== undefined && reshard !== 'true' && reshard !== 'false') {
    throw new UsageError(`--reshard-after-forward ${reshard} is not one of true, false`, {
      option: '--reshard-after-forward',
    });
  }
  // The old spelling of grad-op: --reshard-after-forward false alone.
  const chosen = sharding === undefined && reshard === 'false' ? 'grad-op' : (name as Sharding);
  const contradicts =
    reshard !== undefined &&
    sharding !== undefined &&
    ((chosen === 'grad-op' && reshard === 'true') ||
      (chosen === 'full' && reshard === 'false') ||
      chosen === 'none');
  if (contradicts) {
    throw new UsageError(
      `--sharding ${sharding} contradicts --reshard-after-forward ${reshard}: grad-op keeps the full parameters after forward, full frees them, none never shards`,
      { option: '--reshard-after-forward' },
    );
  }
  return {
    sharding: chosen,
    reshardAfterForward: reshard === undefined ? chosen !== 'grad-op' : reshard === 'true',
  };
}

/**
 * FSDP's options for a sharding. `HYBRID_SHARD`'s node size is the launcher's `LOCAL_WORLD_SIZE`
 * (webshard-run's ranks of one node, with `--nnodes`); ranks the trainer starts itself (`shm`,
 * `local`) are all on this machine, one node of `worldSize`.
 */
export function shardingOptions(
  sharding: Sharding,
  reshardAfterForward: boolean,
  worldSize: number,
  env: Record<string, string | undefined> = launcherEnv(),
): Pick<FsdpOptions, 'shardingStrategy' | 'reshardAfterForward' | 'nodeSize'> {
  const shardingStrategy = STRATEGY[sharding];
  // NO_SHARD never frees parameters: FSDP refuses a reshardAfterForward with it.
  if (sharding === 'none') return { shardingStrategy };
  if (sharding !== 'hybrid') return { shardingStrategy, reshardAfterForward };
  return { shardingStrategy, reshardAfterForward, nodeSize: nodeSizeOf(worldSize, env) };
}

/** The launcher's environment: none in a browser tab (a tab rank is never in a multi-node job's node). */
function launcherEnv(): Record<string, string | undefined> {
  return typeof process === 'undefined' ? {} : process.env;
}

/** The ranks of one node: the launcher's `LOCAL_WORLD_SIZE`, else all `worldSize` (one node). */
function nodeSizeOf(worldSize: number, env: Record<string, string | undefined>): number {
  const local = env.LOCAL_WORLD_SIZE;
  return local === undefined || local === '' ? worldSize : Number(local);
}

/** How many ranks share FSDP's model states under `sharding` (what the memory estimate divides by). */
export function shardCount(
  sharding: Sharding,
  worldSize: number,
  env: Record<string, string | undefined> = launcherEnv(),
): number {
  if (sharding === 'none') return 1;
  return sharding === 'hybrid' ? Math.min(worldSize, nodeSizeOf(worldSize, env)) : worldSize;
}
