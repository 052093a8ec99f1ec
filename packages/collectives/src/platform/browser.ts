import { NodeRequiredError } from '@webshard/tensor-core';
import type * as NodePlatform from './node.js';

// `#platform` for bundles built with the `browser` condition: the loaders of ./node.ts, each
// throwing what a page must do instead. See [Note: the collectives platform module].

/** Throws: a page has no file system (pass `tls` in the options instead). */
export const readFile: typeof NodePlatform.readFile = async () => {
  throw new NodeRequiredError(
    'rendezvous',
    'TLS files named by WEBSHARD_TLS_* are read from disk; in a page pass tls in the options',
  );
};

/**
 * Throws: rank 0 hosts the rendezvous store, a server a page cannot run. The message says to start
 * rank 0 in Node and join pages as the other ranks.
 */
export const loadStoreServer: typeof NodePlatform.loadStoreServer = async () => {
  throw new NodeRequiredError(
    'rendezvous',
    'rank 0 hosts the rendezvous store, and a page cannot listen for connections: a Node process must host the store. Start rank 0 in Node (webshard-run, or initProcessGroup in a Node script) and join pages as ranks 1 to worldSize - 1, with masterAddr and masterPort naming that process',
  );
};

/** Throws: pages have no raw sockets. */
export const loadTcpTransport: typeof NodePlatform.loadTcpTransport = async () => {
  throw new NodeRequiredError(
    'tcp',
    "the tcp transport uses raw sockets, which a page does not have: use backend 'ws'",
  );
};

/** Throws: a page does not pick the address it is reached at (it does not listen). */
export const loadLocalAddressToward: typeof NodePlatform.loadLocalAddressToward = async () => {
  throw new NodeRequiredError('tcp', 'a page does not listen, so it advertises no data address');
};

/** Throws: a page dials with the native WebSocket and never listens. */
export const loadNodeChannels: typeof NodePlatform.loadNodeChannels = async () => {
  throw new NodeRequiredError(
    'ws',
    'a page dials its peers with the native WebSocket and cannot listen for them',
  );
};

/** A page is never a thread rank of webshard-run: no worker_threads, no rank data. */
export const loadWorkerThreads: typeof NodePlatform.loadWorkerThreads = async () => null;

/** Throws: a page's rank has no `worker_threads` (a tab's communication worker is not built). */
export const loadWorkerStarter: typeof NodePlatform.loadWorkerStarter = async () => {
  throw new NodeRequiredError(
    'initProcessGroup',
    "progress 'worker' starts a worker_threads Worker, which a page does not have: leave progress at 'thread' in a page",
  );
};
