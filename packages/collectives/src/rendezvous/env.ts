import { ArgumentError } from '@webshard/tensor-core';
import type { PreAuthLimits } from '../pre-auth-limits.js';
import {
  type Env,
  type EnvSetting,
  fromEnv,
  processEnv,
  RANK_SETTINGS,
  settingVariable,
} from './cluster-env.js';
import { givenStoreLimits, type StoreLimits } from './store-limits.js';

/** Where and how a rank joins: the fields torchrun passes in the environment, plus the token. */
export interface RendezvousOptions {
  rank: number;
  worldSize: number;
  /** Rank 0's address (`MASTER_ADDR`, default `127.0.0.1`). */
  masterAddr: string;
  /** The store's port (`MASTER_PORT`, default 29500). */
  masterPort: number;
  /** The rank on this machine (`LOCAL_RANK`, default `rank`). */
  localRank: number;
  /** The join token (`WEBSHARD_TOKEN`); empty means none (allowed on loopback only). */
  token: string;
  /** Deadline for joining and the default deadline for store waits, in ms (default 300 s). */
  timeoutMs: number;
  /**
   * Address rank 0's store binds to (`WEBSHARD_BIND_ADDR`). Default: `127.0.0.1`, or
   * `masterAddr` when that is not a loopback address.
   */
  bindAddr?: string;
  /**
   * Serve and join with `wss://`: PEM certificate and key (rank 0), CA to trust (all ranks), as
   * strings or bytes (a Node `Buffer` is a `Uint8Array`).
   */
  tls?: { cert?: string | Uint8Array; key?: string | Uint8Array; ca?: string | Uint8Array };
  /**
   * Limits on connections to this rank's ports (the store on rank 0, the data listener) before
   * they show the join token: deadline, bytes, how many at once (see [Note: strangers on a port]).
   */
  preAuth?: PreAuthLimits;
  /**
   * Rank 0's store: the largest value and the most bytes one rank may hold there ([Note: the
   * store's limits]); default `WEBSHARD_STORE_MAX_VALUE_BYTES` and
   * `WEBSHARD_STORE_MAX_CLIENT_BYTES`, else 1 MiB and 16 MiB.
   */
  storeLimits?: StoreLimits;
}

function required(name: string, value: number | undefined): number {
  if (value === undefined) {
    const variables = RANK_SETTINGS[name as 'rank' | 'worldSize'].variables.join(' or ');
    throw new ArgumentError('rendezvous', `${name} is required (option, ${variables})`);
  }
  return value;
}

/**
 * Fills rendezvous options from explicit values first, then torchrun's environment variables
 * (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`), then those of Kubernetes
 * training operators (`PET_MASTER_ADDR`, `PET_MASTER_PORT`) and Slurm (`SLURM_PROCID`,
 * `SLURM_NTASKS`, `SLURM_LOCALID`, the first host of `SLURM_JOB_NODELIST`), each setting on its
 * own ([Note: where ranks learn their place] in cluster-env.ts), and `WEBSHARD_TOKEN`. Defaults:
 * `masterAddr` 127.0.0.1, `masterPort` 29500, `localRank` the rank.
 */
export function resolveRendezvousOptions(
  options: Partial<RendezvousOptions> = {},
  env: Env = processEnv(),
): RendezvousOptions {
  const op = 'rendezvous';
  const rank = required('rank', fromEnv(options.rank, RANK_SETTINGS.rank, env, op));
  const worldSize = required(
    'worldSize',
    fromEnv(options.worldSize, RANK_SETTINGS.worldSize, env, op),
  );
  if (worldSize < 1)
    throw new ArgumentError('rendezvous', `worldSize must be >= 1, got ${worldSize}`);
  if (rank >= worldSize) {
    // Name where each number came from: `RANK=3 ... (WORLD_SIZE=2)`, or the options.
    const named = (
      value: number,
      explicit: unknown,
      setting: EnvSetting<unknown>,
      option: string,
    ) =>
      explicit !== undefined ? `${option} ${value}` : `${settingVariable(setting, env)}=${value}`;
    const rankText = named(rank, options.rank, RANK_SETTINGS.rank, 'rank');
    const sizeText = named(worldSize, options.worldSize, RANK_SETTINGS.worldSize, 'worldSize');
    throw new ArgumentError(
      'rendezvous',
      `${rankText} is outside [0, ${worldSize}) (${sizeText}): ranks run from 0 to the world size - 1`,
    );
  }
  const masterPort = fromEnv(options.masterPort, RANK_SETTINGS.masterPort, env, op) ?? 29500;
  if (masterPort > 65535) throw new ArgumentError('rendezvous', `masterPort ${masterPort} > 65535`);
  const resolved: RendezvousOptions = {
    rank,
    worldSize,
    masterAddr: fromEnv(options.masterAddr, RANK_SETTINGS.masterAddr, env, op) ?? '127.0.0.1',
    masterPort,
    localRank: fromEnv(options.localRank, RANK_SETTINGS.localRank, env, op) ?? rank,
    token: options.token ?? env.WEBSHARD_TOKEN ?? '',
    timeoutMs: options.timeoutMs ?? 300_000,
  };
  const bindAddr = options.bindAddr ?? env.WEBSHARD_BIND_ADDR;
  if (bindAddr !== undefined) resolved.bindAddr = bindAddr;
  if (options.tls !== undefined) resolved.tls = options.tls;
  if (options.preAuth !== undefined) resolved.preAuth = options.preAuth;
  if (rank === 0) {
    const limits = givenStoreLimits(options.storeLimits, env);
    if (limits !== undefined) resolved.storeLimits = limits;
  }
  return resolved;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/** The address rank 0's store binds to. */
export function storeBindAddress(options: RendezvousOptions): string {
  if (options.bindAddr !== undefined) return options.bindAddr;
  return LOOPBACK.has(options.masterAddr) ? '127.0.0.1' : options.masterAddr;
}
