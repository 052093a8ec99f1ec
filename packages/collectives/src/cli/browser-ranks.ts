import { randomBytes } from 'node:crypto';
import { formatJoinUrl } from '../browser-rank.js';
import { freePort, type LaunchOptions } from '../launcher/launcher.js';

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/**
 * [Note: browser ranks in webshard-run]
 * `webshard-run --nproc-per-node N --browser-ranks K script` starts N Node ranks of a world of
 * N + K, as torchrun starts the local part of a job whose other ranks come from elsewhere: the
 * ranks see `WORLD_SIZE=N+K`, and `initProcessGroup({ backend: 'ws' })` in them waits for the K
 * tabs. webshard-run serves no page (the page is the user's: their training code, bundled for
 * the browser, calling `connectBrowserRank({ url, token })`); it picks the store's port and the
 * token, and prints the join URL and the token for it. Ranks are processes (threads share one shm
 * world, which a tab cannot join), and one node only. The tabs dial `MASTER_ADDR` (127.0.0.1 by
 * default); on another address without `WEBSHARD_TLS_CERT` the token and the data travel in
 * cleartext, which it says. `webshard-train --browser-ranks` is the same with the page included
 * (apps/trainer).
 */
export interface BrowserJoin {
  /** The options with the port and token fixed, so the printed URL and token are the job's. */
  options: LaunchOptions;
  /** Lines for stdout: the URL and the token a page passes to `connectBrowserRank`. */
  lines: string[];
  /** Lines for stderr: the cleartext warning, where it applies. */
  warnings: string[];
}

/** Fixes the port and token of a job with `browserRanks > 0` and says how tabs join it. */
export async function browserJoin(
  options: LaunchOptions,
  env: NodeJS.ProcessEnv = process.env,
): Promise<BrowserJoin> {
  const k = options.browserRanks ?? 0;
  const host = options.masterAddr ?? '127.0.0.1';
  const masterPort = options.masterPort ?? (await freePort());
  const token = options.token ?? env.WEBSHARD_TOKEN ?? randomBytes(24).toString('hex');
  const tls = Boolean(env.WEBSHARD_TLS_CERT && env.WEBSHARD_TLS_KEY);
  const world = options.nprocPerNode + k;
  const ranks = Array.from({ length: k }, (_, i) => options.nprocPerNode + i);
  const at = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  const url = formatJoinUrl(`${tls ? 'wss' : 'ws'}://${at}:${masterPort}`, world, ranks);
  const which = k === 1 ? `rank ${ranks[0]}` : `ranks ${ranks[0]} to ${ranks.at(-1)}`;
  const lines = [
    `[webshard-run] browser ranks: ${k} page(s) join as ${which} of ${world} with connectBrowserRank({ url, token }) from @webshard/collectives; the script's ranks must call initProcessGroup({ backend: 'ws' })`,
    `[webshard-run]   url:   ${url}`,
    `[webshard-run]   token: ${token}`,
  ];
  const warnings =
    !LOOPBACK.has(host) && !tls
      ? [
          `[webshard-run] browser ranks on ${host} without TLS: the token and every tensor cross the network in cleartext (ws://); set WEBSHARD_TLS_CERT and WEBSHARD_TLS_KEY (PEM files; WEBSHARD_TLS_CA for a private CA) for wss://`,
        ]
      : [];
  return { options: { ...options, masterPort, token }, lines, warnings };
}
