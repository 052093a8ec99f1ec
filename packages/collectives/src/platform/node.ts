/**
 * [Note: the collectives platform module]
 * What only Node can do here (read TLS files, host the rendezvous store, listen for `ws` peers,
 * dial raw `tcp`, start a communication worker) is loaded through the private import `#platform`, the way tensor-core loads
 * node:fs and Dawn ([Note: the platform module] there). package.json's `imports` maps it to this
 * file in Node, tests and typecheck, and under the `browser` condition to ./browser.ts, whose
 * loaders throw `NodeRequiredError` naming what to do instead. Each loader imports its module on
 * first use, so loading the package in Node still loads none of them until a rank asks.
 */

/** `node:fs/promises` `readFile`, for the TLS files named in the environment. */
export async function readFile(path: string): Promise<Buffer> {
  const fs = await import('node:fs/promises');
  return fs.readFile(path);
}

/** The rendezvous store server that rank 0 hosts. */
export async function loadStoreServer(): Promise<
  typeof import('../rendezvous/store-server.js').StoreServer
> {
  return (await import('../rendezvous/store-server.js')).StoreServer;
}

/** The `tcp` transport (raw sockets). */
export async function loadTcpTransport(): Promise<
  typeof import('../transports/tcp/tcp-transport.js').TcpTransport
> {
  return (await import('../transports/tcp/tcp-transport.js')).TcpTransport;
}

/** The local address that routes toward the master (for a rank's advertised data address). */
export async function loadLocalAddressToward(): Promise<
  typeof import('../transports/tcp/local-address.js').localAddressToward
> {
  return (await import('../transports/tcp/local-address.js')).localAddressToward;
}

/** The `ws` transport's Node channels: a listening server and the `ws` client. */
export async function loadNodeChannels(): Promise<
  typeof import('../transports/ws/ws-node.js').nodeChannels
> {
  return (await import('../transports/ws/ws-node.js')).nodeChannels;
}

/** `node:worker_threads`, to learn whether this thread is a rank webshard-run started. */
export async function loadWorkerThreads(): Promise<typeof import('node:worker_threads') | null> {
  return import('node:worker_threads');
}

/** Starts a rank's communication worker ([Note: the communication worker handshake]). */
export async function loadWorkerStarter(): Promise<
  typeof import('../comm-worker/start-worker.js').startWorker
> {
  return (await import('../comm-worker/start-worker.js')).startWorker;
}
