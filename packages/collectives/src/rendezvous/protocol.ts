/**
 * The rendezvous wire protocol: one JSON object per WebSocket text message, so a browser joins
 * with the native `WebSocket` and nothing else. Browser-safe: no Node imports.
 *
 * [Note: the rendezvous protocol]
 * The first message on a connection must be `hello` with the join token; the server answers it
 * and closes the socket with code 4001 when the token is wrong. After that each request carries an
 * `id` the response echoes. `get` and `wait` block on the server until the keys exist or their
 * `timeoutMs` passes (the error then lists the missing keys). The server also pushes
 * `{event: 'rankLost', rank}` when a joined rank's connection drops without a `bye`, so every rank
 * learns about a dead peer even when it has no data socket to it.
 */

/** Largest key the server accepts, in UTF-16 code units. */
export const MAX_KEY_LENGTH = 1024;
/** Largest message either side accepts, in bytes. */
export const MAX_MESSAGE_BYTES = 4 << 20;
/** Close code for a refused join (wrong token, bad hello, duplicate rank). */
export const CLOSE_REFUSED = 4001;
/** Close code for a protocol violation after the join. */
export const CLOSE_PROTOCOL = 4002;

export type StoreRequest =
  | { id: number; op: 'hello'; token: string; rank: number; worldSize: number }
  | { id: number; op: 'set'; key: string; value: string }
  | { id: number; op: 'get'; key: string; timeoutMs: number }
  | { id: number; op: 'check'; keys: string[] }
  | { id: number; op: 'add'; key: string; delta: number }
  | { id: number; op: 'wait'; keys: string[]; timeoutMs: number }
  | { id: number; op: 'compareSet'; key: string; expected: string; desired: string }
  | { id: number; op: 'delete'; key: string }
  | { id: number; op: 'bye' };

export interface StoreErrorBody {
  code: string;
  message: string;
  missingKeys?: string[];
}

export type StoreResponse =
  | { id: number; ok: true; value?: string | number | boolean | null }
  | { id: number; ok: false; error: StoreErrorBody }
  | { event: 'rankLost'; rank: number };

function isKey(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && value.length <= MAX_KEY_LENGTH;
}

function isKeyList(value: unknown): value is string[] {
  return Array.isArray(value) && value.length <= 65536 && value.every(isKey);
}

function isTimeout(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 && value <= 2 ** 31;
}

/**
 * Parses and validates one request; returns a reason string instead of throwing so a hostile
 * client can never make the server throw.
 */
export function parseRequest(text: string): StoreRequest | string {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return 'not JSON';
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return 'not an object';
  const r = raw as Record<string, unknown>;
  if (typeof r.id !== 'number' || !Number.isSafeInteger(r.id)) return 'missing numeric id';
  switch (r.op) {
    case 'hello':
      return typeof r.token === 'string' &&
        Number.isSafeInteger(r.rank) &&
        Number.isSafeInteger(r.worldSize)
        ? (r as StoreRequest)
        : 'bad hello';
    case 'set':
      return isKey(r.key) && typeof r.value === 'string' ? (r as StoreRequest) : 'bad set';
    case 'get':
      return isKey(r.key) && isTimeout(r.timeoutMs) ? (r as StoreRequest) : 'bad get';
    case 'check':
      return isKeyList(r.keys) ? (r as StoreRequest) : 'bad check';
    case 'add':
      return isKey(r.key) && Number.isSafeInteger(r.delta) ? (r as StoreRequest) : 'bad add';
    case 'wait':
      return isKeyList(r.keys) && isTimeout(r.timeoutMs) ? (r as StoreRequest) : 'bad wait';
    case 'compareSet':
      return isKey(r.key) && typeof r.expected === 'string' && typeof r.desired === 'string'
        ? (r as StoreRequest)
        : 'bad compareSet';
    case 'delete':
      return isKey(r.key) ? (r as StoreRequest) : 'bad delete';
    case 'bye':
      return r as StoreRequest;
    default:
      return 'unknown op';
  }
}

/** Parses a server message on the client side; `undefined` for anything malformed. */
export function parseResponse(text: string): StoreResponse | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof raw !== 'object' || raw === null) return undefined;
  const r = raw as Record<string, unknown>;
  if (r.event === 'rankLost' && Number.isSafeInteger(r.rank)) return r as StoreResponse;
  if (typeof r.id !== 'number') return undefined;
  if (r.ok === true) return r as StoreResponse;
  if (r.ok === false && typeof r.error === 'object' && r.error !== null) return r as StoreResponse;
  return undefined;
}
