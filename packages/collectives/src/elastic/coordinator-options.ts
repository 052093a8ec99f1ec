import { ArgumentError } from '@webshard/tensor-core';
import type { TlsOptions } from '../rendezvous/store-server.js';
import { BEATS_PER_TIMEOUT, DEFAULT_MEMBER_TIMEOUT_MS } from './liveness.js';
import { checkWorldBounds, type WorldBounds } from './membership.js';
import type { EpochAnnouncement } from './protocol.js';

/** Options of `ElasticCoordinator.start`. */
export interface ElasticCoordinatorOptions extends WorldBounds {
  /** Port to listen on (default 0: a free one, read it from `port` or `url`). */
  port?: number;
  /** Address to bind and to announce for the epochs' stores (default `127.0.0.1`). */
  host?: string;
  /** The join token every member must present; required off loopback. */
  token?: string;
  /**
   * Serve the coordinator and every epoch's store over `wss://` with this PEM certificate and key
   * ([Note: an elastic world over TLS]): members then join at `wss://`, and the join token crosses
   * the network only inside TLS.
   */
  tls?: TlsOptions;
  /**
   * Forming the first epoch: once `minWorldSize` members wait, how long to wait for more (up to
   * `maxWorldSize`, which forms it at once). Default 0.
   */
  joinWindowMs?: number;
  /**
   * At a sync point, how long the members that arrived wait for the others before the latecomers
   * are dropped as gone (their connection is closed). Default 300 s.
   */
  syncTimeoutMs?: number;
  /** How long a world below `minWorldSize` waits for members to join before it fails. Default 60 s. */
  belowMinTimeoutMs?: number;
  /** A member that does not send a valid `join` within this time is disconnected. Default 10 s. */
  helloTimeoutMs?: number;
  /**
   * A member silent this long (no answer to the coordinator's beats: frozen, or cut off) is
   * dropped as gone ([Note: liveness in an elastic world]). Default 60 s.
   */
  memberTimeoutMs?: number;
  /** How often the coordinator beats. Default a sixth of `memberTimeoutMs`. */
  heartbeatMs?: number;
  /**
   * A file the coordinator keeps its world in (the epoch, its members, the next id), written
   * atomically after every change and removed when the job ends: a coordinator started again on
   * it takes the world back as its members resume. Without it a restarted coordinator adopts the
   * epoch the first member to resume reports.
   */
  statePath?: string;
  /**
   * Told of each change of membership as it is announced, before any member hears of it (a log
   * line written here comes before every line the members write in the new epoch).
   */
  onEpoch?: (change: EpochAnnouncement) => void;
}

/** The options with every default filled in, and the port the server got. */
export type ResolvedCoordinatorOptions = Required<
  Omit<ElasticCoordinatorOptions, 'token' | 'statePath' | 'onEpoch' | 'tls'>
> & {
  token: string;
  tls: TlsOptions | null;
  statePath: string | null;
  onEpoch: ((change: EpochAnnouncement) => void) | null;
};

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/** Checks `options` (an `ArgumentError` names what is wrong) before anything listens. */
export function checkCoordinatorOptions(options: ElasticCoordinatorOptions): void {
  checkWorldBounds(options, 'ElasticCoordinator');
  const host = options.host ?? '127.0.0.1';
  if (!LOOPBACK.has(host) && (options.token ?? '') === '') {
    throw new ArgumentError(
      'ElasticCoordinator',
      `binding to ${host} needs a join token (option token or WEBSHARD_TOKEN)`,
    );
  }
  for (const name of ['memberTimeoutMs', 'heartbeatMs', 'syncTimeoutMs'] as const) {
    const value = options[name];
    if (value !== undefined && !(Number.isFinite(value) && value > 0)) {
      throw new ArgumentError(
        'ElasticCoordinator',
        `${name} must be a positive number of ms, got ${value}`,
      );
    }
  }
}

/** `options` with their defaults, once the server listens on `port`. */
export function resolveCoordinatorOptions(
  options: ElasticCoordinatorOptions,
  port: number,
): ResolvedCoordinatorOptions {
  const memberTimeoutMs = options.memberTimeoutMs ?? DEFAULT_MEMBER_TIMEOUT_MS;
  return {
    minWorldSize: options.minWorldSize,
    maxWorldSize: options.maxWorldSize,
    port,
    host: options.host ?? '127.0.0.1',
    token: options.token ?? '',
    tls: options.tls ?? null,
    joinWindowMs: options.joinWindowMs ?? 0,
    syncTimeoutMs: options.syncTimeoutMs ?? 300_000,
    belowMinTimeoutMs: options.belowMinTimeoutMs ?? 60_000,
    helloTimeoutMs: options.helloTimeoutMs ?? 10_000,
    memberTimeoutMs,
    heartbeatMs: options.heartbeatMs ?? Math.max(10, memberTimeoutMs / BEATS_PER_TIMEOUT),
    statePath: options.statePath ?? null,
    onEpoch: options.onEpoch ?? null,
  };
}
