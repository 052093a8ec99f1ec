import { ArgumentError } from '@webshard/tensor-core';
import type { NetworkBackend } from '../connect-transport.js';
import {
  defaultWebSocket,
  trustingWebSocket,
  type WebSocketConstructor,
} from '../rendezvous/store-client.js';

/** A member's TLS material ([Note: an elastic world over TLS]): PEM strings or bytes. */
export interface JoinTls {
  cert?: string | Uint8Array;
  key?: string | Uint8Array;
  ca?: string | Uint8Array;
}

/** What of `joinElastic`'s options bears on TLS. */
interface TlsJoinOptions {
  url: string;
  backend?: NetworkBackend;
  listen?: boolean;
  tls?: JoinTls;
  WebSocket?: WebSocketConstructor;
}

/** Whether this runs in Node (members there listen by default; browsers cannot). */
export function isNode(): boolean {
  return typeof process !== 'undefined' && typeof process.versions?.node === 'string';
}

/**
 * Refuses, before anything connects, a member whose `tls` cannot keep the token out of clear text
 * or could not listen: a `ws://` coordinator, backend `tcp` (no TLS), or a listening member
 * without its certificate and key (found in the epoch's build instead, it would be retried as if
 * a peer had failed).
 */
export function checkJoinTls(options: TlsJoinOptions): void {
  const { tls } = options;
  if (tls === undefined) return;
  const fail = (detail: string) => {
    throw new ArgumentError('join', detail);
  };
  if (!options.url.startsWith('wss://')) {
    fail(
      `tls is given but the coordinator's URL ${options.url} is not wss://: the join token would cross the network in the clear`,
    );
  }
  if ((options.backend ?? (isNode() ? 'tcp' : 'ws')) === 'tcp') {
    fail(
      "tls is given with backend 'tcp', which has no TLS (its data and join token would travel in the clear): use backend 'ws'",
    );
  }
  const listens = (options.listen ?? isNode()) && isNode();
  if (listens && (!tls.cert || !tls.key)) {
    fail(
      'tls needs cert and key for this member to listen on wss:// (or listen: false, behind a NAT)',
    );
  }
}

/** The WebSocket the member reaches the coordinator and the stores with: trusting `tls.ca`. */
export async function trustingCoordinator(
  options: TlsJoinOptions,
): Promise<WebSocketConstructor | undefined> {
  const ca = options.tls?.ca;
  if (ca === undefined) return options.WebSocket;
  return trustingWebSocket(options.WebSocket ?? (await defaultWebSocket()), ca);
}
