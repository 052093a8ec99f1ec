import { ArgumentError } from '@webshard/tensor-core';
import { createNetworkTransport, JoinedTransport } from './connect-transport.js';
import { ProcessGroup, type ProcessGroupOptions } from './process-group.js';
import type { RendezvousOptions } from './rendezvous/env.js';
import { RendezvousError } from './rendezvous/errors.js';
import { StoreClient, type WebSocketConstructor } from './rendezvous/store-client.js';

/**
 * [Note: joining a job as a browser rank]
 * A page does not know its rank: the job's Node rank 0 hosts the rendezvous store, and the job
 * tells pages where it is and which ranks are theirs in a join URL,
 * `ws://host:port/?worldSize=W&ranks=A-B` (the store ignores the path and query). A page claims
 * the first free rank of `A..B` with the store's own join: `hello` with a rank another
 * connection holds is refused ("rank r has already joined"), so two tabs opened at once never
 * get the same rank, and no new message is needed in the protocol. The page then stays joined
 * with that connection and connects the `ws` transport over it, without listening: it dials the
 * Node ranks, and its traffic with other pages goes through rank 0's relay (see [Note: ws
 * connections] in transports/ws/ws-transport.ts). The token is passed apart from the URL, so a page
 * can keep it out of anything it sends (a URL fragment, not a query).
 */

/** Options of `connectBrowserRank`. */
export interface BrowserRankOptions {
  /** The join URL the job printed: `ws://host:port/?worldSize=W&ranks=A-B` (or `wss://`). */
  url: string;
  /** The job's join token. */
  token: string;
  /** Deadline for reaching the store and for connecting to every rank, in ms (default 300 s). */
  timeoutMs?: number;
  /** Settings of the world group (deadlines, segment sizes). */
  group?: ProcessGroupOptions;
  /** Overrides the WebSocket (default: the native one in browsers, `ws` in Node). */
  WebSocket?: WebSocketConstructor;
  /** Accept connections from other ranks (default false: a page cannot; tests in Node may). */
  listen?: boolean;
}

/** A joined browser rank: its world group and where it sits in it. */
export interface BrowserRank {
  group: ProcessGroup;
  rank: number;
  worldSize: number;
}

/** What a join URL says: the store's address, the world size, the ranks open to pages. */
export interface JoinUrl {
  store: string;
  worldSize: number;
  ranks: number[];
}

/** Builds the join URL a job prints for its pages (see [Note: joining a job as a browser rank]). */
export function formatJoinUrl(store: string, worldSize: number, ranks: readonly number[]): string {
  const first = ranks[0];
  const last = ranks.at(-1);
  if (first === undefined || last === undefined || last - first !== ranks.length - 1) {
    throw new ArgumentError(
      'connectBrowserRank',
      'browser ranks must be consecutive, at least one',
    );
  }
  return `${store.replace(/\/+$/, '')}/?worldSize=${worldSize}&ranks=${first}-${last}`;
}

/** Reads a join URL; an `ArgumentError` naming what is wrong with it. */
export function parseJoinUrl(url: string): JoinUrl {
  const fail = (why: string) =>
    new ArgumentError(
      'connectBrowserRank',
      `join URL ${url}: ${why} (expected ws://host:port/?worldSize=W&ranks=A-B)`,
    );
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw fail('not a URL');
  }
  if (parsed.protocol !== 'ws:' && parsed.protocol !== 'wss:') throw fail('not ws:// or wss://');
  const worldSize = Number(parsed.searchParams.get('worldSize'));
  if (!Number.isSafeInteger(worldSize) || worldSize < 2) throw fail('worldSize must be >= 2');
  const match = /^(\d+)-(\d+)$/.exec(parsed.searchParams.get('ranks') ?? '');
  const first = Number(match?.[1]);
  const last = Number(match?.[2]);
  if (match === null || first < 1 || last < first || last >= worldSize) {
    throw fail(`ranks must be A-B with 1 <= A <= B < worldSize`);
  }
  const ranks = Array.from({ length: last - first + 1 }, (_, i) => first + i);
  return { store: `${parsed.protocol}//${parsed.host}`, worldSize, ranks };
}

const TAKEN = /has already joined/;

/**
 * Joins a job as one of its browser ranks: claims the first free rank named by the join URL,
 * connects the `ws` transport to every other rank (pages through rank 0's relay) and returns the
 * world group. Every rank of the job may be joined; a rank already held is skipped, and a job
 * whose browser ranks are all taken is a `RendezvousError` with code `E_RANKS_TAKEN`. A wrong
 * token is a `RendezvousError` with code `E_AUTH`. Closing the group leaves the job.
 */
export async function connectBrowserRank(options: BrowserRankOptions): Promise<BrowserRank> {
  const { store: storeUrl, worldSize, ranks } = parseJoinUrl(options.url);
  const timeoutMs = options.timeoutMs ?? 300_000;
  let store: StoreClient | null = null;
  for (const rank of ranks) {
    try {
      store = await StoreClient.connect({
        url: storeUrl,
        token: options.token,
        rank,
        worldSize,
        timeoutMs,
        ...(options.WebSocket !== undefined ? { WebSocket: options.WebSocket } : {}),
      });
      break;
    } catch (error) {
      if (!(error instanceof RendezvousError && TAKEN.test(error.message))) throw error;
    }
  }
  if (store === null) {
    throw new RendezvousError(
      'connectBrowserRank',
      `every browser rank of this job (${ranks[0]} to ${ranks.at(-1)} of ${worldSize}) is taken`,
      { code: 'E_RANKS_TAKEN' },
    );
  }
  const joined = {
    options: {
      rank: store.rank,
      worldSize,
      masterAddr: new URL(storeUrl).hostname,
      masterPort: Number(new URL(storeUrl).port),
      localRank: store.rank,
      token: options.token,
      timeoutMs,
    } satisfies RendezvousOptions,
    store,
    close: () => store.close(),
  };
  let transport: JoinedTransport;
  try {
    const inner = await createNetworkTransport('ws', joined, { listen: options.listen ?? false });
    transport = new JoinedTransport(inner, joined);
  } catch (error) {
    await store.close();
    throw error;
  }
  return {
    group: ProcessGroup.fromTransport(transport, options.group),
    rank: store.rank,
    worldSize,
  };
}
