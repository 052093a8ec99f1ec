import type { Socket } from 'node:net';
import type { Channel, MessageReader } from './channel.js';
import {
  closePayload,
  frameHead,
  Opcode,
  WebSocketFrameDecoder,
  type WebSocketEvents,
} from './websocket-frames.js';

/** Payload bytes below which a message goes out as one buffer with its frame head (one copy). */
const SMALL_MESSAGE = 1024;
/** Below this many bytes left in a frame, a read goes to scratch and is copied. */
const DIRECT_READ_MIN = 16 << 10;
const SCRATCH_BYTES = 64 << 10;
/** How long a connection that broke the protocol gets to take our close frame. */
const CLOSE_GRACE_MS = 1000;

/**
 * A WebSocket over a socket whose upgrade handshake is done (Node; see [Note: reading WebSocket
 * frames ourselves]). Until `stream` is called, whole messages go to `onMessage` (the hello,
 * before which a connection is a stranger: it never buffers more than `maxMessageBytes`, and the
 * pre-auth guard destroys it far sooner); messages that come before `onMessage` is set wait for
 * it. After `stream`, message bytes go to the reader as they arrive.
 */
export class WebSocketChannel implements Channel, WebSocketEvents {
  onClose: (detail: string) => void = () => {};
  authenticated?: () => void;
  private handler: ((bytes: Uint8Array | string) => void) | null = null;
  private readonly held: (Uint8Array | string)[] = [];
  private reader: MessageReader | null = null;
  private parts: Uint8Array[] = [];
  private partsBytes = 0;
  private partsBinary = true;
  private closeSent = false;
  private closeCode: number | undefined;
  private corked = false;
  private readonly decoder: WebSocketFrameDecoder;
  /** Where reads with `onread` go when not straight into a destination (made on first use). */
  private scratch: Buffer | null = null;

  /**
   * `client`: this end dialed (it masks its frames, the other end must not). `strangerBytes`
   * (an accepted socket that reads with `onread`): told how many bytes each read brought until
   * the channel streams, for the limits on strangers ([Note: strangers on a port]).
   */
  constructor(
    private readonly socket: Socket,
    private readonly client: boolean,
    private readonly maxMessageBytes: number,
    authenticated?: () => void,
    private readonly strangerBytes?: (n: number) => void,
  ) {
    this.decoder = new WebSocketFrameDecoder(this, !client);
    if (authenticated !== undefined) this.authenticated = authenticated;
    socket.on('error', () => {});
    // The peer finished sending: finish too (an HTTP server's sockets allow half-open ones).
    socket.once('end', () => socket.end());
    socket.once('close', () => this.onClose(`its WebSocket closed (${this.closeCode ?? 1006})`));
  }

  get onMessage(): (bytes: Uint8Array | string) => void {
    return this.handler ?? (() => {});
  }

  set onMessage(handler: (bytes: Uint8Array | string) => void) {
    this.handler = handler;
    while (this.held.length > 0 && this.handler === handler && this.reader === null) {
      handler(this.held.shift()!);
    }
  }

  /** Payload bytes the kernel read straight into their destination (a tuning counter). */
  get bytesReadInPlace(): number {
    return this.decoder.bytesInPlace;
  }

  /** Bytes read from the socket by 'data' events (accepted and TLS sockets). */
  push(bytes: Uint8Array): void {
    this.decoder.push(bytes);
  }

  /** For `onread`: where the next bytes should be read (see `WebSocketFrameDecoder.readBuffer`). */
  readBuffer(): Uint8Array {
    this.scratch ??= Buffer.allocUnsafe(SCRATCH_BYTES);
    return this.decoder.readBuffer(this.scratch, DIRECT_READ_MIN);
  }

  /** For `onread`: `n` bytes were read into `buffer`. */
  afterRead(buffer: Uint8Array, n: number): void {
    if (this.reader === null) this.strangerBytes?.(n);
    this.decoder.afterRead(buffer, n);
  }

  stream(reader: MessageReader): void {
    this.reader = reader;
    for (const message of this.held.splice(0)) {
      if (typeof message === 'string') {
        reader.begin(false, undefined);
        continue;
      }
      reader.begin(true, message.byteLength);
      reader.bytes(message);
      reader.end();
    }
  }

  send(bytes: Uint8Array, done?: (error?: Error) => void): void {
    this.write(Opcode.binary, bytes, done);
  }

  close(): void {
    this.sendClose(1000, 'bye');
  }

  destroy(): void {
    this.socket.destroy();
  }

  messageStart(binary: boolean, length: number | undefined): void {
    if (this.reader !== null) {
      this.reader.begin(binary, length);
      return;
    }
    this.parts = [];
    this.partsBytes = 0;
    this.partsBinary = binary;
  }

  messageBytes(chunk: Uint8Array): void {
    if (this.reader !== null) {
      this.reader.bytes(chunk);
      return;
    }
    this.partsBytes += chunk.byteLength;
    if (this.partsBytes > this.maxMessageBytes) {
      this.protocolError(1009, 'message too big');
      return;
    }
    this.parts.push(chunk.slice());
  }

  messageEnd(): void {
    if (this.reader !== null) {
      this.reader.end();
      return;
    }
    const message = new Uint8Array(this.partsBytes);
    let at = 0;
    for (const part of this.parts) {
      message.set(part, at);
      at += part.byteLength;
    }
    this.parts = [];
    const data = this.partsBinary ? message : new TextDecoder().decode(message);
    if (this.handler === null) this.held.push(data);
    else this.handler(data);
  }

  directTarget(min: number): Uint8Array | null {
    return this.reader?.directTarget(min) ?? null;
  }

  directDone(n: number): void {
    this.reader?.advanceDirect(n, false);
  }

  control(opcode: number, payload: Uint8Array): void {
    if (opcode === Opcode.ping) {
      this.write(Opcode.pong, payload.slice());
    } else if (opcode === Opcode.close) {
      const code = payload.byteLength >= 2 ? (payload[0]! << 8) | payload[1]! : 1005;
      this.closeCode = code;
      if (!this.closeSent) {
        this.closeSent = true;
        this.rawWrite(Opcode.close, code === 1005 ? new Uint8Array(0) : payload.slice(0, 2));
      }
      this.socket.end();
    }
  }

  protocolError(code: number, reason: string): void {
    this.sendClose(code, reason);
    setTimeout(() => this.socket.destroy(), CLOSE_GRACE_MS).unref();
  }

  private sendClose(code: number, reason: string): void {
    if (this.closeSent || this.socket.destroyed) return;
    this.closeSent = true;
    this.rawWrite(Opcode.close, closePayload(code, reason));
    this.socket.end();
  }

  private write(opcode: number, bytes: Uint8Array, done?: (error?: Error) => void): void {
    if (this.closeSent || this.socket.destroyed || !this.socket.writable) {
      done?.(new Error('WebSocket is not open'));
      return;
    }
    this.rawWrite(opcode, bytes, done);
  }

  /**
   * One frame: a small one as a single buffer, a large one as its head and the caller's view
   * (never copied), corked until the end of this tick so the transport's header message and its
   * payload leave in one write.
   */
  private rawWrite(opcode: number, bytes: Uint8Array, done?: (error?: Error) => void): void {
    const head = frameHead(opcode, bytes.byteLength, this.client);
    const callback =
      done === undefined ? undefined : (error?: Error | null) => done(error ?? undefined);
    if (!this.corked) {
      this.corked = true;
      this.socket.cork();
      process.nextTick(() => {
        this.corked = false;
        this.socket.uncork();
      });
    }
    if (bytes.byteLength <= SMALL_MESSAGE) {
      const frame = Buffer.allocUnsafe(head.byteLength + bytes.byteLength);
      frame.set(head);
      frame.set(bytes, head.byteLength);
      this.socket.write(frame, callback);
    } else {
      this.socket.write(head);
      this.socket.write(bytes, callback);
    }
  }
}
