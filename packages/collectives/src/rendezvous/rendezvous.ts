import { ArgumentError } from '@webshard/tensor-core';
import { loadStoreServer, readFile } from '#platform';
import { type RendezvousOptions, resolveRendezvousOptions, storeBindAddress } from './env.js';
import { RendezvousError } from './errors.js';
import { StoreClient, type WebSocketConstructor } from './store-client.js';
import type { StoreServer } from './store-server.js';

/** A joined rendezvous: the store client, and on rank 0 the server it hosts. */
export interface Rendezvous {
  readonly options: RendezvousOptions;
  readonly store: StoreClient;
  /** Leaves the store; rank 0 then waits briefly for the others to leave and stops the server. */
  close(): Promise<void>;
}

/**
 * TLS files named by `WEBSHARD_TLS_CERT`, `WEBSHARD_TLS_KEY` and `WEBSHARD_TLS_CA` (PEM paths), so
 * ranks started by `webshard-run` can join over `wss://` without code. Node only; an unreadable
 * file is an `ArgumentError` naming the variable.
 */
async function tlsFromEnvironment(): Promise<RendezvousOptions['tls']> {
  if (typeof process === 'undefined' || typeof process.versions?.node !== 'string')
    return undefined;
  const names = { cert: 'WEBSHARD_TLS_CERT', key: 'WEBSHARD_TLS_KEY', ca: 'WEBSHARD_TLS_CA' };
  const given = Object.entries(names).filter(([, name]) => process.env[name]);
  if (given.length === 0) return undefined;
  const tls: NonNullable<RendezvousOptions['tls']> = {};
  for (const [field, name] of given) {
    const path = process.env[name]!;
    try {
      tls[field as keyof typeof names] = await readFile(path);
    } catch (error) {
      throw new ArgumentError(
        'rendezvous',
        `${name}=${path} cannot be read: ${(error as Error).message}`,
      );
    }
  }
  return tls;
}

/**
 * Starts the store on rank 0; a port that is taken (EADDRINUSE) or refused (EACCES) is a
 * one-line `RendezvousError` (code `E_PORT_IN_USE`, `E_PORT_REFUSED`) naming the port, the
 * variable that sets it and what to do, not Node's stack from `listen`.
 */
async function listenOrExplain(server: StoreServer, host: string, port: number): Promise<number> {
  try {
    return await server.listen();
  } catch (error) {
    await server.close();
    const code = (error as { code?: unknown }).code;
    const where = `rank 0's store cannot listen on ${host}:${port} (MASTER_PORT or masterPort)`;
    if (code === 'EADDRINUSE') {
      throw new RendezvousError(
        'rendezvous',
        `${where}: the port is in use by another process (another job, or an earlier run still holding it); give every rank the same free port, or stop what holds it`,
        { rank: 0, code: 'E_PORT_IN_USE', cause: error },
      );
    }
    if (code === 'EACCES') {
      throw new RendezvousError(
        'rendezvous',
        `${where}: permission denied (ports below 1024 need privileges); choose a port from 1024 to 65535`,
        { rank: 0, code: 'E_PORT_REFUSED', cause: error },
      );
    }
    throw error;
  }
}

/**
 * Joins the rendezvous: rank 0 starts the store server (Node only, loaded lazily), then every
 * rank connects to it with the token. Options not given come from torchrun's environment.
 */
export async function rendezvous(
  partial: Partial<RendezvousOptions> & { WebSocket?: WebSocketConstructor } = {},
): Promise<Rendezvous> {
  const options = resolveRendezvousOptions(partial);
  if (options.tls === undefined) {
    const tls = await tlsFromEnvironment();
    if (tls !== undefined) options.tls = tls;
  }
  let server: StoreServer | undefined;
  let port = options.masterPort;
  if (options.rank === 0) {
    const tls = options.tls;
    if (tls !== undefined && (tls.cert === undefined || tls.key === undefined)) {
      throw new ArgumentError('rendezvous', 'rank 0 hosts the store: tls needs cert and key there');
    }
    const Server = await loadStoreServer();
    server = new Server({
      port: options.masterPort,
      host: storeBindAddress(options),
      token: options.token,
      worldSize: options.worldSize,
      ...(options.preAuth !== undefined ? { preAuth: options.preAuth } : {}),
      ...(options.storeLimits !== undefined ? { limits: options.storeLimits } : {}),
      ...(tls?.cert !== undefined && tls.key !== undefined
        ? { tls: { cert: tls.cert, key: tls.key } }
        : {}),
    });
    port = await listenOrExplain(server, storeBindAddress(options), options.masterPort);
  }
  const scheme = options.tls === undefined ? 'ws' : 'wss';
  const host = options.rank === 0 ? storeBindAddress(options) : options.masterAddr;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  let store: StoreClient;
  try {
    store = await StoreClient.connect({
      url: `${scheme}://${urlHost}:${port}`,
      token: options.token,
      rank: options.rank,
      worldSize: options.worldSize,
      timeoutMs: options.timeoutMs,
      ...(options.tls?.ca !== undefined ? { ca: options.tls.ca } : {}),
      ...(partial.WebSocket !== undefined ? { WebSocket: partial.WebSocket } : {}),
    });
  } catch (error) {
    await server?.close();
    throw error;
  }
  const resolved: RendezvousOptions = { ...options, masterPort: port };
  return {
    options: resolved,
    store,
    async close() {
      if (server !== undefined) {
        const deadline = Date.now() + 2000;
        while (server.joinedRanks().length > 1 && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      }
      await store.close();
      await server?.close();
    },
  };
}
