import { loadNodeChannels } from '#platform';
import { type ChannelFactory, nativeChannels, type WsTlsOptions } from './channel.js';

/** Whether this runs in Node (else a browser). */
export function isNode(): boolean {
  return typeof process !== 'undefined' && typeof process.versions?.node === 'string';
}

/**
 * [Note: ws over TLS]
 * With `tls` (the rendezvous' option, so `initProcessGroup({ backend: 'ws', tls })` covers the
 * store and the data connections alike), every Node rank serves its listener over HTTPS and
 * advertises a `wss://` URL; the certificate must be valid for the address the rank advertises
 * (`host` / `WEBSHARD_HOST_ADDR`, 127.0.0.1 on one machine) and signed by a CA every rank trusts
 * (`tls.ca`, else Node's default CAs). A rank with `tls` dials only `wss://` URLs: a peer started
 * without TLS is refused before the hello, so the join token never crosses the network in the
 * clear. The token check, frames and relaying are the same as without TLS; TLS costs a handshake
 * per pair and encryption on the data path (the tcp transport has no TLS).
 */
export async function defaultChannels(tls: WsTlsOptions | undefined): Promise<ChannelFactory> {
  if (isNode()) {
    const nodeChannels = await loadNodeChannels();
    return nodeChannels(tls);
  }
  const native = (globalThis as { WebSocket?: unknown }).WebSocket;
  return nativeChannels(native as Parameters<typeof nativeChannels>[0]);
}
