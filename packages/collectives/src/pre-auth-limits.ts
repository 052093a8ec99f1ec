// The limits a rank puts on strangers, apart from the guard that enforces them (pre-auth-guard.ts,
// which needs `node:net`): the options and the ws transport that a browser loads import only this.
/** Limits on connections that have not yet shown the join token (see [Note: strangers on a port]). */
export interface PreAuthLimits {
  /** Milliseconds from accept to a verified hello; then the connection is destroyed (10 000). */
  handshakeTimeoutMs?: number;
  /** Bytes a connection may send before its hello is verified (8 KiB). */
  maxBytes?: number;
  /** Unverified connections held at once; one more is destroyed on accept (64). */
  maxPending?: number;
}

export const DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000;
export const DEFAULT_PRE_AUTH_BYTES = 8 << 10;
export const DEFAULT_MAX_PENDING = 64;

/** The limits with every default filled in. */
export function preAuthLimits(limits: PreAuthLimits = {}): Required<PreAuthLimits> {
  return {
    handshakeTimeoutMs: limits.handshakeTimeoutMs ?? DEFAULT_HANDSHAKE_TIMEOUT_MS,
    maxBytes: limits.maxBytes ?? DEFAULT_PRE_AUTH_BYTES,
    maxPending: limits.maxPending ?? DEFAULT_MAX_PENDING,
  };
}
