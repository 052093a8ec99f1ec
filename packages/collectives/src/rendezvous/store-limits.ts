import { ArgumentError } from '@webshard/tensor-core';
import type { Env } from './cluster-env.js';

/** How much one client may make the rendezvous store hold. */
export interface StoreLimits {
  /** Largest value of one key, in UTF-8 bytes (default 1 MiB, `WEBSHARD_STORE_MAX_VALUE_BYTES`). */
  maxValueBytes?: number;
  /**
   * Most bytes of keys and values one client (rank) holds in the store at once, in UTF-8 bytes
   * (default 16 MiB, `WEBSHARD_STORE_MAX_CLIENT_BYTES`).
   */
  maxClientBytes?: number;
}

export const DEFAULT_STORE_MAX_VALUE_BYTES = 1 << 20;
export const DEFAULT_STORE_MAX_CLIENT_BYTES = 16 << 20;

const VARIABLES = {
  maxValueBytes: 'WEBSHARD_STORE_MAX_VALUE_BYTES',
  maxClientBytes: 'WEBSHARD_STORE_MAX_CLIENT_BYTES',
} as const;

/** The store's answer code when a limit refuses a write. */
export const STORE_LIMIT_CODE = 'E_STORE_LIMIT';

/**
 * The limits from explicit options first, then `WEBSHARD_STORE_MAX_VALUE_BYTES` and
 * `WEBSHARD_STORE_MAX_CLIENT_BYTES`; a value that is not a whole number of bytes is an
 * `ArgumentError` naming the option or variable.
 */
export function resolveStoreLimits(
  options: StoreLimits = {},
  env: Env = {},
): Required<StoreLimits> {
  const one = (field: keyof StoreLimits, fallback: number): number => {
    const given = options[field];
    if (given !== undefined) return checked(given, `storeLimits.${field}`);
    const text = env[VARIABLES[field]];
    if (text === undefined || text === '') return fallback;
    const value = /^\d+$/.test(text.trim()) ? Number(text.trim()) : Number.NaN;
    return checked(value, `${VARIABLES[field]}=${text}`);
  };
  return {
    maxValueBytes: one('maxValueBytes', DEFAULT_STORE_MAX_VALUE_BYTES),
    maxClientBytes: one('maxClientBytes', DEFAULT_STORE_MAX_CLIENT_BYTES),
  };
}

/**
 * The limits that options or the environment set (checked, defaults filled in), or undefined when
 * neither sets any (the store then uses the defaults).
 */
export function givenStoreLimits(
  options: StoreLimits | undefined,
  env: Env,
): Required<StoreLimits> | undefined {
  const named = Object.values(VARIABLES).some(
    (name) => env[name] !== undefined && env[name] !== '',
  );
  if (options === undefined && !named) return undefined;
  return resolveStoreLimits(options, env);
}

function checked(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new ArgumentError(
      'rendezvous',
      `${name}: a store limit must be a whole number of bytes >= 1`,
    );
  }
  return value;
}

/** UTF-8 bytes of `text` without encoding it (a lone surrogate counts 3, as the encoder's U+FFFD). */
function utf8Bytes(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) bytes += 1;
    else if (code < 0x800) bytes += 2;
    else if (code >= 0xd800 && code < 0xdc00 && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next < 0xe000) {
        bytes += 4;
        i++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

/**
 * [Note: the store's limits]
 * Every joined rank can write the store, and the store lives in rank 0's process: 48 keys of
 * 2 MiB grew it by 131 MiB (#33 item 7), and nothing bounded it. So the store refuses a value
 * over `maxValueBytes` and a write that would make one client hold more than `maxClientBytes` of
 * keys and values (a key counts against the rank that wrote it last; deleting it gives the bytes
 * back). A refused write changes nothing and answers `E_STORE_LIMIT`: the client's call rejects
 * with a `RendezvousError` of that code naming the key, the sizes and the option to raise. The
 * store of a world of N ranks holds at most N times `maxClientBytes`. What webshard keeps there
 * (addresses, progress reports, abort reasons) is a few KiB per rank.
 */
export class StoreQuota {
  private readonly owners = new Map<string, { rank: number; bytes: number }>();
  private readonly used = new Map<number, number>();

  constructor(private readonly limits: Required<StoreLimits>) {}

  /** Why `rank` may not set `key` to `value`, or null when it may. */
  refusal(rank: number, key: string, value: string): string | null {
    const valueBytes = utf8Bytes(value);
    if (valueBytes > this.limits.maxValueBytes) {
      return `the value of key '${key}' is ${valueBytes} bytes, over the store's limit of ${this.limits.maxValueBytes} bytes per value (storeLimits.maxValueBytes or ${VARIABLES.maxValueBytes})`;
    }
    const previous = this.owners.get(key);
    const freed = previous !== undefined && previous.rank === rank ? previous.bytes : 0;
    const after = (this.used.get(rank) ?? 0) - freed + utf8Bytes(key) + valueBytes;
    if (after > this.limits.maxClientBytes) {
      return `setting key '${key}' would make rank ${rank} hold ${after} bytes of keys and values in the store, over its limit of ${this.limits.maxClientBytes} bytes per client (storeLimits.maxClientBytes or ${VARIABLES.maxClientBytes})`;
    }
    return null;
  }

  /** Records that `rank` set `key` to `value` (after `refusal` said yes). */
  wrote(rank: number, key: string, value: string): void {
    this.deleted(key);
    const bytes = utf8Bytes(key) + utf8Bytes(value);
    this.owners.set(key, { rank, bytes });
    this.used.set(rank, (this.used.get(rank) ?? 0) + bytes);
  }

  /** Records that `key` is gone. */
  deleted(key: string): void {
    const previous = this.owners.get(key);
    if (previous === undefined) return;
    this.owners.delete(key);
    this.used.set(previous.rank, (this.used.get(previous.rank) ?? 0) - previous.bytes);
  }

  /** Bytes of keys and values `rank` holds in the store. */
  usedBy(rank: number): number {
    return this.used.get(rank) ?? 0;
  }
}
