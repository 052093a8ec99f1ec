import type { Incoming } from '../mailbox.js';
import { type FrameHeader, HEADER_BYTES } from './frame.js';

/** Where the payload of a frame whose header just arrived goes (the transport decides). */
export type PayloadPlan =
  /** The frame has no payload (a bye, an empty message): the next header follows. */
  | { kind: 'none' }
  /** A data frame: its payload goes into the mailbox's target. */
  | { kind: 'data'; incoming: Incoming }
  /** A control frame (abort, relay): its payload is collected, then handed to `onControl`. */
  | { kind: 'control'; frame: FrameHeader; buffer: Uint8Array }
  /** The header was a violation (already reported): read nothing more from this peer. */
  | { kind: 'stop' };

/** What a frame reader reports to its transport. */
export interface FrameHandler {
  /** A whole header (`HEADER_BYTES`) arrived, not yet validated. */
  onHeader(header: Uint8Array): PayloadPlan;
  /** A data payload is in its target. */
  onData(incoming: Incoming): void;
  /** The payload of a control frame, whole. */
  onControl(frame: FrameHeader, payload: Uint8Array): void;
  /** The peer broke the framing; `detail` completes "malformed frame from rank r: ". */
  violation(detail: string): void;
}

type State =
  | { kind: 'header'; filled: number }
  | { kind: 'data'; incoming: Incoming; offset: number }
  | { kind: 'control'; frame: FrameHeader; buffer: Uint8Array; offset: number }
  | { kind: 'stopped' };

/**
 * One peer's incoming frames ([Note: network frames]), fed as a byte stream (`tcp`: `write`)
 * or as messages (`ws`: `begin` / `write` / `end`, one message for a header and one for a
 * non-empty payload). A payload is written straight into its mailbox target; a socket reader
 * asks `directTarget` for the view to read the next bytes into (then `advanceDirect`), so the
 * kernel copies a large payload into the receive's buffer with no copy in JavaScript.
 *
 * [Note: message boundaries on ws]
 * Over `ws` a header must be one whole message of `HEADER_BYTES` and a payload exactly the message
 * after it; a message of another length is a violation naming its length. When the length is known at
 * the start (an unfragmented WebSocket frame: every message from Node, nearly every one from a
 * browser) it is checked before a byte is written; a fragmented message is checked at its end,
 * counting what does not fit without keeping it.
 */
export class FrameReader {
  private state: State = { kind: 'header', filled: 0 };
  private readonly header = new Uint8Array(HEADER_BYTES);
  /** Message mode: bytes of the current message so far (past what the frame needs: counted). */
  private messageBytes = 0;

  constructor(private readonly handler: FrameHandler) {}

  /** Whether nothing more is read (after a violation). */
  get stopped(): boolean {
    return this.state.kind === 'stopped';
  }

  /** Whether the next message is a payload (message mode). */
  get expectsPayload(): boolean {
    return this.state.kind === 'data' || this.state.kind === 'control';
  }

  stop(): void {
    this.state = { kind: 'stopped' };
  }

  /** A view of the current data payload's rest, when at least `min` bytes remain; else null. */
  directTarget(min: number): Uint8Array | null {
    const state = this.state;
    if (state.kind !== 'data') return null;
    const target = state.incoming.target;
    if (target.byteLength - state.offset < min) return null;
    return target.subarray(state.offset);
  }

  /**
   * `n` bytes were read into the view `directTarget` gave. In stream mode a full payload
   * completes here; in message mode at `end`.
   */
  advanceDirect(n: number, stream = true): void {
    const state = this.state;
    if (state.kind !== 'data') return;
    state.offset += n;
    this.messageBytes += n;
    if (stream && state.offset === state.incoming.target.byteLength) this.finishPayload();
  }

  /** Stream mode: consumes `bytes`, which may hold any number of frames and pieces of them. */
  write(bytes: Uint8Array): void {
    let pos = 0;
    const end = bytes.byteLength;
    while (pos < end) {
      const state = this.state;
      if (state.kind === 'stopped') return;
      if (state.kind === 'header') {
        const n = Math.min(HEADER_BYTES - state.filled, end - pos);
        this.header.set(bytes.subarray(pos, pos + n), state.filled);
        state.filled += n;
        pos += n;
        if (state.filled === HEADER_BYTES) this.finishHeader();
        continue;
      }
      const target = state.kind === 'data' ? state.incoming.target : state.buffer;
      const n = Math.min(target.byteLength - state.offset, end - pos);
      target.set(bytes.subarray(pos, pos + n), state.offset);
      state.offset += n;
      pos += n;
      if (state.offset === target.byteLength) this.finishPayload();
    }
  }

  /**
   * Message mode: a message begins; `length` when known now. A text message, or a known length
   * other than what comes next, is a violation at once.
   */
  begin(binary: boolean, length: number | undefined): void {
    if (this.state.kind === 'stopped') return;
    this.messageBytes = 0;
    if (!binary) this.fail('text message');
    else if (length !== undefined) this.checkLength(length);
  }

  /** Message mode: the next bytes of the current message. */
  bytes(chunk: Uint8Array): void {
    const state = this.state;
    const start = this.messageBytes;
    this.messageBytes += chunk.byteLength;
    if (state.kind === 'stopped') return;
    const into =
      state.kind === 'header'
        ? this.header
        : state.kind === 'data'
          ? state.incoming.target
          : state.buffer;
    if (start >= into.byteLength) return;
    const piece = chunk.subarray(0, into.byteLength - start);
    into.set(piece, start);
    if (state.kind === 'header') state.filled = start + piece.byteLength;
    else state.offset = start + piece.byteLength;
  }

  /** Message mode: the current message ended. */
  end(): void {
    if (this.state.kind === 'stopped') return;
    if (!this.checkLength(this.messageBytes)) return;
    if (this.state.kind === 'header') this.finishHeader();
    else this.finishPayload();
  }

  /** Message mode: one whole message (a browser's, a relayed frame's). */
  message(bytes: Uint8Array | string): void {
    if (typeof bytes === 'string') {
      this.begin(false, undefined);
      return;
    }
    this.begin(true, bytes.byteLength);
    this.bytes(bytes);
    this.end();
  }

  private checkLength(length: number): boolean {
    const state = this.state;
    if (state.kind === 'header') {
      if (length === HEADER_BYTES) return true;
      this.fail(`expected a ${HEADER_BYTES}-byte header, got ${length} bytes`);
      return false;
    }
    if (state.kind === 'stopped') return false;
    const expected = state.kind === 'data' ? state.incoming.target.byteLength : state.buffer.length;
    if (length === expected) return true;
    this.fail(`payload of ${length} bytes after a header announcing ${expected}`);
    return false;
  }

  private fail(detail: string): void {
    this.state = { kind: 'stopped' };
    this.handler.violation(detail);
  }

  private finishHeader(): void {
    this.state = { kind: 'header', filled: 0 };
    const plan = this.handler.onHeader(this.header);
    // The handler may have stopped this reader (a violation).
    if (this.stopped) return;
    switch (plan.kind) {
      case 'none':
        return;
      case 'stop':
        this.state = { kind: 'stopped' };
        return;
      case 'data':
        this.state = { kind: 'data', incoming: plan.incoming, offset: 0 };
        return;
      case 'control':
        this.state = { kind: 'control', frame: plan.frame, buffer: plan.buffer, offset: 0 };
        return;
    }
  }

  private finishPayload(): void {
    const state = this.state;
    this.state = { kind: 'header', filled: 0 };
    if (state.kind === 'data') this.handler.onData(state.incoming);
    else if (state.kind === 'control') this.handler.onControl(state.frame, state.buffer);
  }
}
