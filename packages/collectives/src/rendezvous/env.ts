import { ArgumentError } from '@webshard/tensor-core';
import type { PreAuthLimits } from '../pre-auth-guard.js';

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
  /** Serve and join with `wss://`: PEM certificate and key (rank 0), CA to trust (all ranks). */
  tls?: { cert?: string | Buffer; key?: string | Buffer; ca?: string | Buffer };
  /**
   * Limits on connections to this rank's ports (the store on rank 0, the data listener) before
   * they show the join token: deadline, bytes, how many at once (see [Note: strangers on a port]).
   */
  preAuth?: PreAuthLimits;
}

type Env = Record<string, string | undefined>;

function processEnv(): Env {
  return typeof process === 'undefined' ? {} : (process.env as Env);
}

function integer(name: string, text: string | undefined, fallback?: number): number {
  if (text === undefined || text === '') {
    if (fallback === undefined) {
      throw new ArgumentError('rendezvous', `${name} is required (option or environment variable)`);
    }
    return fallback;
  }
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new ArgumentError('rendezvous', `${name} must be a non-negative integer, got '${text}'`);
  }
  return value;
}

/**
 * Fills rendezvous options from explicit values first, then torchrun's environment variables
 * (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`) and `WEBSHARD_TOKEN`.
 */
export function resolveRendezvousOptions(
  options: Partial<RendezvousOptions> = {},
  env: Env = processEnv(),
): RendezvousOptions {
  const rank = options.rank ?? integer('RANK', env.RANK);
  const worldSize = options.worldSize ?? integer('WORLD_SIZE', env.WORLD_SIZE);
  if (worldSize < 1)
    throw new ArgumentError('rendezvous', `worldSize must be >= 1, got ${worldSize}`);
  if (rank >= worldSize) {
    throw new ArgumentError('rendezvous', `rank ${rank} is outside [0, ${worldSize})`);
  }
  const masterPort = options.masterPort ?? integer('MASTER_PORT', env.MASTER_PORT, 29500);
  if (masterPort > 65535) throw new ArgumentError('rendezvous', `masterPort ${masterPort} > 65535`);
  const resolved: RendezvousOptions = {
    rank,
    worldSize,
    masterAddr: options.masterAddr ?? env.MASTER_ADDR ?? '127.0.0.1',
    masterPort,
    localRank: options.localRank ?? integer('LOCAL_RANK', env.LOCAL_RANK, rank),
    token: options.token ?? env.WEBSHARD_TOKEN ?? '',
    timeoutMs: options.timeoutMs ?? 300_000,
  };
  const bindAddr = options.bindAddr ?? env.WEBSHARD_BIND_ADDR;
  if (bindAddr !== undefined) resolved.bindAddr = bindAddr;
  if (options.tls !== undefined) resolved.tls = options.tls;
  if (options.preAuth !== undefined) resolved.preAuth = options.preAuth;
  return resolved;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/** The address rank 0's store binds to. */
export function storeBindAddress(options: RendezvousOptions): string {
  if (options.bindAddr !== undefined) return options.bindAddr;
  return LOOPBACK.has(options.masterAddr) ? '127.0.0.1' : options.masterAddr;
}
