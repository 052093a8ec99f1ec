import { RendezvousError } from './errors.js';
import { parseResponse, type StoreRequest } from './protocol.js';

/**
 * The part of the WebSocket API the store client uses: the browser's native `WebSocket` and the
 * `ws` package both provide it.
 */
export interface WebSocketLike {
  readonly readyState: number;
  binaryType: string;
  send(data: string | ArrayBufferView | ArrayBuffer): void;
  close(code?: number, reason?: string): void;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
}

/** A WebSocket constructor: `globalThis.WebSocket` in browsers, `ws` in Node. */
export type WebSocketConstructor = new (
  url: string,
  protocols?: string | string[],
  options?: Record<string, unknown>,
) => WebSocketLike;

/**
 * The `ws` package in Node (it takes a CA for self-signed `wss://`), loaded lazily, and the native
 * WebSocket everywhere else, so a browser bundle never evaluates a Node-only module.
 */
export async function defaultWebSocket(): Promise<WebSocketConstructor> {
  const inNode = typeof process !== 'undefined' && typeof process.versions?.node === 'string';
  const native = (globalThis as { WebSocket?: unknown }).WebSocket;
  if (!inNode && typeof native === 'function') return native as WebSocketConstructor;
  const module = await import('ws');
  return module.WebSocket as unknown as WebSocketConstructor;
}

/**
 * `Ctor` trusting `ca` for `wss://` (Node's `ws` takes it as an option; a browser's native
 * WebSocket uses its own trust store and ignores it).
 */
export function trustingWebSocket(
  Ctor: WebSocketConstructor,
  ca: string | Uint8Array,
): WebSocketConstructor {
  return class extends (Ctor as new (...args: unknown[]) => WebSocketLike) {
    constructor(url: string, protocols?: string | string[], options?: Record<string, unknown>) {
      super(url, protocols, { ...options, ca });
    }
  } as unknown as WebSocketConstructor;
}

/** Options to join the rendezvous store. */
export interface StoreClientOptions {
  /** `ws://host:port` or `wss://host:port`. */
  url: string;
  token?: string;
  rank: number;
  worldSize: number;
  /** Deadline for connecting (retried while rank 0 is not up yet) and the default for waits. */
  timeoutMs?: number;
  /** Node only: trusted CA for `wss://` (PEM), for self-signed certificates. */
  ca?: string | Uint8Array;
  /** Overrides the WebSocket implementation. */
  WebSocket?: WebSocketConstructor;
}

interface Pending {
  op: string;
  resolve: (value: string | number | boolean | null | undefined) => void;
  reject: (error: RendezvousError) => void;
}

type ClientState = { kind: 'open'; socket: WebSocketLike } | { kind: 'closed'; reason: string };

const OPEN = 1;
/** How long closing waits for the store to answer the goodbye. */
const BYE_MS = 1_000;

function messageText(data: unknown): string | undefined {
  if (typeof data === 'string') return data;
  if (data instanceof ArrayBuffer) return new TextDecoder().decode(data);
  if (ArrayBuffer.isView(data)) return new TextDecoder().decode(data);
  return undefined;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * A client of the rendezvous store (browser-safe). Values are strings; `add` keeps decimal
 * integers. Every blocking call has a deadline.
 */
export class StoreClient {
  readonly rank: number;
  readonly worldSize: number;
  readonly timeoutMs: number;
  private state: ClientState;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly lostListeners = new Set<(rank: number) => void>();
  private readonly barrierCounts = new Map<string, number>();

  private constructor(socket: WebSocketLike, options: StoreClientOptions) {
    this.rank = options.rank;
    this.worldSize = options.worldSize;
    this.timeoutMs = options.timeoutMs ?? 300_000;
    this.state = { kind: 'open', socket };
    socket.onmessage = (event) => this.receive(event.data);
    socket.onclose = (event) => this.shutdown(`the store connection closed (${event.code})`);
    socket.onerror = () => {};
  }

  /**
   * Connects and joins, retrying refused connections until `timeoutMs` (rank 0 may start later).
   * A wrong token fails at once with code `E_AUTH`.
   */
  static async connect(options: StoreClientOptions): Promise<StoreClient> {
    const Ctor = options.WebSocket ?? (await defaultWebSocket());
    const deadline = Date.now() + (options.timeoutMs ?? 300_000);
    let delay = 20;
    let lastError = 'no attempt';
    for (;;) {
      const opened = await StoreClient.open(Ctor, options);
      if (typeof opened !== 'string') {
        const client = new StoreClient(opened, options);
        try {
          await client.request({
            id: 0,
            op: 'hello',
            token: options.token ?? '',
            rank: options.rank,
            worldSize: options.worldSize,
          });
        } catch (error) {
          const refused = error instanceof RendezvousError && error.code === 'E_AUTH';
          throw new RendezvousError(
            'rendezvous',
            `join refused by ${options.url}: ${(error as Error).message}`,
            { rank: options.rank, code: refused ? 'E_AUTH' : 'E_RENDEZVOUS', cause: error },
          );
        }
        return client;
      }
      lastError = opened;
      if (Date.now() + delay > deadline) {
        throw new RendezvousError(
          'rendezvous',
          `could not reach the store at ${options.url} within ${options.timeoutMs ?? 300_000} ms: ${lastError}`,
          { rank: options.rank, code: 'E_TIMEOUT' },
        );
      }
      await sleep(delay);
      delay = Math.min(delay * 2, 500);
    }
  }

  private static open(
    Ctor: WebSocketConstructor,
    options: StoreClientOptions,
  ): Promise<WebSocketLike | string> {
    return new Promise((resolve) => {
      let socket: WebSocketLike;
      try {
        socket =
          options.ca === undefined
            ? new Ctor(options.url)
            : new Ctor(options.url, undefined, { ca: options.ca });
      } catch (error) {
        resolve(String((error as Error).message ?? error));
        return;
      }
      socket.binaryType = 'arraybuffer';
      socket.onopen = () => resolve(socket);
      socket.onerror = (event) => {
        const message = (event as { message?: string; error?: Error }).message;
        resolve(message ?? 'connection error');
      };
      socket.onclose = (event) => resolve(`closed (${event.code})`);
    });
  }

  /** Registers a callback for ranks whose store connection dropped (they probably died). */
  onRankLost(listener: (rank: number) => void): () => void {
    this.lostListeners.add(listener);
    return () => this.lostListeners.delete(listener);
  }

  async set(key: string, value: string): Promise<void> {
    await this.request({ id: 0, op: 'set', key, value });
  }

  /** The value of `key`, waiting until some rank sets it (at most `timeoutMs`). */
  async get(key: string, timeoutMs = this.timeoutMs): Promise<string> {
    const value = await this.request({ id: 0, op: 'get', key, timeoutMs });
    return String(value);
  }

  /** Adds `delta` to the integer at `key` (missing counts as 0); returns the new value. */
  async add(key: string, delta: number): Promise<number> {
    return Number(await this.request({ id: 0, op: 'add', key, delta }));
  }

  /** Whether all `keys` exist now. */
  async check(keys: string[]): Promise<boolean> {
    return (await this.request({ id: 0, op: 'check', keys })) === true;
  }

  /**
   * Waits until all `keys` exist. On timeout it rejects with a `RendezvousError` (code
   * `E_TIMEOUT`) whose `missingKeys` lists those still absent.
   */
  async wait(keys: string[], timeoutMs = this.timeoutMs): Promise<void> {
    await this.request({ id: 0, op: 'wait', keys, timeoutMs });
  }

  /**
   * Sets `key` to `desired` when its value is `expected` (`''` matches a missing key); returns
   * the value after the call.
   */
  async compareSet(key: string, expected: string, desired: string): Promise<string | null> {
    const value = await this.request({ id: 0, op: 'compareSet', key, expected, desired });
    return value === null || value === undefined ? null : String(value);
  }

  /** Deletes `key`; returns whether it existed. */
  async delete(key: string): Promise<boolean> {
    return (await this.request({ id: 0, op: 'delete', key })) === true;
  }

  /**
   * Blocks until every rank reaches a barrier with the same name. On timeout the error's
   * `missingRanks` (and message) list the ranks that never arrived.
   */
  async barrier(name = 'barrier', timeoutMs = this.timeoutMs): Promise<void> {
    const count = this.barrierCounts.get(name) ?? 0;
    this.barrierCounts.set(name, count + 1);
    const prefix = `__barrier/${name}/${count}`;
    await this.set(`${prefix}/${this.rank}`, '1');
    const keys = Array.from({ length: this.worldSize }, (_, rank) => `${prefix}/${rank}`);
    try {
      await this.request({ id: 0, op: 'wait', keys, timeoutMs });
    } catch (error) {
      if (error instanceof RendezvousError && error.code === 'E_TIMEOUT') {
        const missingRanks = error.missingKeys.map((key) => Number(key.slice(prefix.length + 1)));
        throw new RendezvousError(
          'barrier',
          `'${name}' timed out after ${timeoutMs} ms; ranks that never arrived: ${missingRanks.join(', ')}`,
          { rank: this.rank, code: 'E_TIMEOUT', missingRanks, missingKeys: error.missingKeys },
        );
      }
      throw error;
    }
  }

  /**
   * Leaves the store politely (no `rankLost` for this rank) and closes the socket. The goodbye
   * waits at most `BYE_MS` for its answer: a stopped store host never answers it ([Note: a
   * silent store host] in store-progress-board.ts).
   */
  async close(): Promise<void> {
    if (this.state.kind !== 'open') return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([
        this.request({ id: 0, op: 'bye' }),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, BYE_MS);
        }),
      ]);
    } catch {
      // The store may already be gone; closing is all that is left to do.
    } finally {
      clearTimeout(timer);
    }
    if (this.state.kind === 'open') this.state.socket.close(1000, 'bye');
    this.shutdown('the store client was closed');
  }

  private request(message: StoreRequest): Promise<string | number | boolean | null | undefined> {
    if (this.state.kind !== 'open' || this.state.socket.readyState !== OPEN) {
      const reason = this.state.kind === 'closed' ? this.state.reason : 'the socket is not open';
      return Promise.reject(new RendezvousError(message.op, reason, { rank: this.rank }));
    }
    const id = this.nextId++;
    const { socket } = this.state;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { op: message.op, resolve, reject });
      socket.send(JSON.stringify({ ...message, id }));
    });
  }

  private receive(data: unknown): void {
    const text = messageText(data);
    const message = text === undefined ? undefined : parseResponse(text);
    if (message === undefined) return;
    if ('event' in message) {
      for (const listener of this.lostListeners) listener(message.rank);
      return;
    }
    const pending = this.pending.get(message.id);
    if (pending === undefined) return;
    this.pending.delete(message.id);
    if (message.ok) {
      pending.resolve(message.value);
      return;
    }
    const missingKeys = message.error.missingKeys ?? [];
    const detail =
      message.error.code === 'E_TIMEOUT'
        ? `timed out; keys never set: ${missingKeys.join(', ')}`
        : message.error.message;
    pending.reject(
      new RendezvousError(pending.op, detail, {
        rank: this.rank,
        code: message.error.code,
        missingKeys,
      }),
    );
  }

  private shutdown(reason: string): void {
    if (this.state.kind === 'closed') return;
    this.state = { kind: 'closed', reason };
    for (const pending of this.pending.values()) {
      pending.reject(new RendezvousError(pending.op, reason, { rank: this.rank }));
    }
    this.pending.clear();
  }
}
