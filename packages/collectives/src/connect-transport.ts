import { ArgumentError } from '@webshard/tensor-core';
import { loadLocalAddressToward, loadTcpTransport } from '#platform';
import type { AbortReason } from './errors.js';
import type { OpStamp } from './op-stamp.js';
import { attachProgressBoard, progressReportOf, shareProgress } from './progress/progress.js';
import { StoreProgressBoard } from './rendezvous/store-progress-board.js';
import type { Transport } from './transport-contract.js';
import type { RendezvousOptions } from './rendezvous/env.js';
import { type Rendezvous, rendezvous } from './rendezvous/rendezvous.js';
import type { WebSocketConstructor } from './rendezvous/store-client.js';
import { agreedLink, type LinkSettings, shapeLink } from './two-level/link-shaper.js';

const noop = () => {};

/** Which network transport to run over the rendezvous. */
export type NetworkBackend = 'tcp' | 'ws';

/** Options of `connectNetworkTransport`: the rendezvous (torchrun environment by default) and more. */
export interface NetworkTransportOptions extends Partial<RendezvousOptions> {
  backend: NetworkBackend;
  /**
   * Address this rank's data listener binds to and advertises (`WEBSHARD_HOST_ADDR`; default
   * `127.0.0.1` when the master is on loopback, else this machine's address toward the master).
   */
  host?: string;
  /** Largest message accepted from a peer, in bytes (default 2^32). */
  maxMessageBytes?: number;
  /**
   * Most payload held per peer that no receive has claimed, in bytes (default
   * `WEBSHARD_MAX_UNEXPECTED_BYTES`, else 256 MiB; [Note: the unexpected-message budget] in
   * transports/unexpected-budget.ts): a peer that sends more aborts the group naming it.
   */
  maxUnexpectedBytes?: number;
  /** `ws` only: accept connections (default: true in Node, false in browsers). */
  listen?: boolean;
  /** Overrides the WebSocket used for the rendezvous (browsers: the native one by default). */
  WebSocket?: WebSocketConstructor;
  /**
   * A simulated link between every pair of ranks ([Note: the link shaper] in
   * two-level/link-shaper.ts): a preset's name (`broadband-20`), `WEBSHARD_LINK`-style settings or
   * `LinkSettings`; `none` or empty: none. Given, every rank must give the same (checked through
   * the store against rank 0's); absent, no shaping (`initProcessGroup` passes `WEBSHARD_LINK`).
   */
  link?: LinkSettings | string;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/**
 * Where this rank's data listener binds and what it advertises, unless told (`host` option or
 * `WEBSHARD_HOST_ADDR`): loopback when the master is on loopback, else the address of the
 * interface that routes toward the master, so ranks on other machines can reach it. Undefined in
 * browsers, which do not listen.
 */
async function defaultDataHost(joined: Rendezvous): Promise<string | undefined> {
  if (typeof process === 'undefined' || typeof process.versions?.node !== 'string')
    return undefined;
  const fromEnv = process.env.WEBSHARD_HOST_ADDR;
  if (fromEnv) return fromEnv;
  const { masterAddr, masterPort } = joined.options;
  if (LOOPBACK.has(masterAddr)) return '127.0.0.1';
  const localAddressToward = await loadLocalAddressToward();
  return localAddressToward(masterAddr, masterPort || 29500);
}

/**
 * The tcp transport has no TLS: with `tls` its frames and its hello (which carries the join
 * token) would cross the network in the clear, so the combination is refused.
 */
function checkTls(backend: NetworkBackend, tls: RendezvousOptions['tls']): void {
  if (backend === 'tcp' && tls !== undefined) {
    throw new ArgumentError(
      'tcp',
      "the tcp transport has no TLS (its data and join token would travel in the clear): use backend 'ws' with tls",
    );
  }
}

/**
 * Creates the data transport of `backend` on a rendezvous that is already joined. The transport
 * modules are loaded lazily, so a browser that asks for `ws` never loads `node:net`.
 */
export async function createNetworkTransport(
  backend: NetworkBackend,
  joined: Rendezvous,
  options: Pick<
    NetworkTransportOptions,
    'host' | 'maxMessageBytes' | 'maxUnexpectedBytes' | 'listen'
  > = {},
): Promise<Transport> {
  checkTls(backend, joined.options.tls);
  const host = options.host ?? (await defaultDataHost(joined));
  const common = {
    store: joined.store,
    token: joined.options.token,
    timeoutMs: joined.options.timeoutMs,
    ...(host !== undefined ? { host } : {}),
    ...(options.maxMessageBytes !== undefined ? { maxMessageBytes: options.maxMessageBytes } : {}),
    ...(options.maxUnexpectedBytes !== undefined
      ? { maxUnexpectedBytes: options.maxUnexpectedBytes }
      : {}),
    ...(joined.options.preAuth !== undefined ? { preAuth: joined.options.preAuth } : {}),
  };
  let transport: Transport;
  if (backend === 'tcp') {
    const TcpTransport = await loadTcpTransport();
    transport = await TcpTransport.create(common);
  } else {
    const { WsTransport } = await import('./transports/ws/ws-transport.js');
    transport = await WsTransport.create({
      ...common,
      ...(options.listen !== undefined ? { listen: options.listen } : {}),
      ...(joined.options.tls !== undefined ? { tls: joined.options.tls } : {}),
    });
  }
  // Deadlines poll the ranks through the store: see [Note: blaming a stalled rank].
  const board = new StoreProgressBoard(joined.store, () => progressReportOf(transport));
  attachProgressBoard(transport, board);
  return transport;
}

/**
 * Joins the rendezvous (rank 0 hosts the store) and connects the `tcp` or `ws` transport to every
 * other rank. Closing the returned transport also leaves the rendezvous.
 */
export async function connectNetworkTransport(
  options: NetworkTransportOptions,
): Promise<Transport> {
  const { backend, host, maxMessageBytes, maxUnexpectedBytes, listen, link, ...rest } = options;
  checkTls(backend, rest.tls);
  const joined = await rendezvous(rest);
  let transport: Transport;
  try {
    const { store, options: agreed } = joined;
    const settings =
      link === undefined ? null : await agreedLink(store, agreed.rank, link, agreed.timeoutMs);
    transport = await createNetworkTransport(backend, joined, {
      host,
      maxMessageBytes,
      maxUnexpectedBytes,
      listen,
    });
    // Shaped where the bytes move: on the communication worker when the group runs there.
    if (settings !== null) {
      const shaped = shapeLink(transport, settings);
      shareProgress(shaped, transport);
      transport = shaped;
    }
  } catch (error) {
    await joined.close();
    throw error;
  }
  const wrapper = new JoinedTransport(transport, joined);
  shareProgress(wrapper, transport);
  return wrapper;
}

/** A transport that owns its rendezvous: closing it leaves the store too. */
export class JoinedTransport implements Transport {
  private closing: Promise<void> | null = null;
  constructor(
    private readonly inner: Transport,
    private readonly joined: Rendezvous,
  ) {}
  get rank(): number {
    return this.inner.rank;
  }
  get size(): number {
    return this.inner.size;
  }
  get kind(): string {
    return this.inner.kind;
  }
  get abortReason(): AbortReason | null {
    return this.inner.abortReason;
  }
  send(peer: number, tag: number, data: Uint8Array, stamp?: OpStamp): Promise<void> {
    return this.inner.send(peer, tag, data, stamp);
  }
  /** Rule 11 of [Note: the transport contract], passed to the transport under it. */
  expect(peer: number, tag: number, stamp: OpStamp, bytes: number, messages: number): () => void {
    return this.inner.expect?.(peer, tag, stamp, bytes, messages) ?? noop;
  }

  recv(
    peer: number,
    tag: number,
    dst: Uint8Array,
    onArrive?: () => void,
    stamp?: OpStamp,
  ): Promise<void> {
    return this.inner.recv(peer, tag, dst, onArrive, stamp);
  }
  abort(reason: AbortReason): void {
    this.inner.abort(reason);
  }
  onAbort(listener: (reason: AbortReason) => void): () => void {
    return this.inner.onAbort(listener);
  }
  close(): Promise<void> {
    this.closing ??= this.inner.close().then(() => this.joined.close());
    return this.closing;
  }
}
