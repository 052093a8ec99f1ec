import type { PreAuthLimits } from '../../pre-auth-limits.js';
import type { RendezvousOptions } from '../../rendezvous/env.js';

/** TLS material of the `ws` transport: the rendezvous' `tls` option (PEM strings or buffers). */
export type WsTlsOptions = NonNullable<RendezvousOptions['tls']>;

/**
 * Takes a peer's messages piece by piece as a channel reads them (the transport's `FrameReader`
 * in message mode): `begin`, `bytes` (or a direct read into `directTarget`, then `advanceDirect`),
 * `end`.
 */
export interface MessageReader {
  begin(binary: boolean, length: number | undefined): void;
  bytes(chunk: Uint8Array): void;
  end(): void;
  directTarget(min: number): Uint8Array | null;
  advanceDirect(n: number, stream?: boolean): void;
}

/**
 * A message channel to one peer: what the `ws` transport needs from a WebSocket, with one
 * implementation over the browser's native `WebSocket` here (browser-safe) and one that reads and
 * writes WebSocket frames on a Node socket itself in `ws-node.ts` (Node only, loaded lazily).
 */
export interface Channel {
  /** Sends one binary message; `done` runs once `bytes` may be reused. */
  send(bytes: Uint8Array, done?: (error?: Error) => void): void;
  /** Closes gracefully (pending messages go out first). */
  close(): void;
  /** Drops the connection now. */
  destroy(): void;
  /** Binary messages (text messages arrive as strings and are protocol violations). */
  onMessage: (bytes: Uint8Array | string) => void;
  /** Called once when the connection is gone, with a short description. */
  onClose: (detail: string) => void;
  /**
   * An accepted channel whose hello checked out: the listener stops holding it to the limits on
   * strangers (see [Note: strangers on a port]). Absent on dialed channels.
   */
  authenticated?: () => void;
  /**
   * From now on, hand messages to `reader` piece by piece instead of whole to `onMessage` (Node
   * channels, after the hello; absent where messages only come whole, as in browsers).
   */
  stream?: (reader: MessageReader) => void;
}

/** How a listener treats connections before their hello (Node). */
export interface ListenOptions {
  preAuth?: PreAuthLimits;
  /** Connections the group itself keeps open on this listener (bounds the total with `preAuth`). */
  expectedConnections?: number;
}

/** A listening endpoint that accepts channels (Node only). */
export interface Listener {
  readonly url: string;
  close(): Promise<void>;
}

/** Opens and accepts channels. */
export interface ChannelFactory {
  dial(url: string): Promise<Channel>;
  /** Absent where this rank cannot accept connections (browsers). */
  listen?: (
    host: string,
    maxMessageBytes: number,
    accept: (channel: Channel) => void,
    options?: ListenOptions,
  ) => Promise<Listener>;
  /** Constant-time token check for hellos (only needed where `listen` exists). */
  tokenMatches?: (given: Uint8Array, expected: string) => boolean;
}

interface NativeWebSocket {
  binaryType: string;
  readonly bufferedAmount: number;
  send(data: ArrayBufferView | ArrayBuffer): void;
  close(code?: number, reason?: string): void;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
}

type NativeWebSocketConstructor = new (url: string) => NativeWebSocket;

/**
 * Channels over the native `WebSocket` (browsers). Views on a `SharedArrayBuffer` cannot be sent
 * by a browser, so those are copied first.
 */
export function nativeChannels(WebSocketImpl: NativeWebSocketConstructor): ChannelFactory {
  return {
    dial(url) {
      return new Promise((resolve, reject) => {
        const socket = new WebSocketImpl(url);
        socket.binaryType = 'arraybuffer';
        const channel: Channel = {
          send(bytes, done) {
            // A browser's send() copies, but refuses views on a SharedArrayBuffer: copy those.
            const view = bytes.buffer instanceof ArrayBuffer ? bytes : bytes.slice();
            try {
              socket.send(view);
              done?.();
            } catch (error) {
              done?.(error as Error);
            }
          },
          close: () => socket.close(1000, 'bye'),
          destroy: () => socket.close(4000, 'destroyed'),
          onMessage: () => {},
          onClose: () => {},
        };
        socket.onopen = () => resolve(channel);
        socket.onerror = () => reject(new Error(`could not connect to ${url}`));
        socket.onmessage = (event) => {
          const data = event.data;
          channel.onMessage(typeof data === 'string' ? data : new Uint8Array(data as ArrayBuffer));
        };
        socket.onclose = (event) => channel.onClose(`its WebSocket closed (${event.code})`);
      });
    },
  };
}
