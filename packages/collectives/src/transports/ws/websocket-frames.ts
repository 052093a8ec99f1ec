/**
 * WebSocket framing (RFC 6455 section 5) for the `ws` transport's Node side: a streaming decoder
 * and the head of an outgoing frame. Pure byte logic, no Node imports (the fuzz test feeds it any
 * bytes).
 *
 * [Note: reading WebSocket frames ourselves]
 * The `ws` package hands over whole messages: it keeps every fragment of a 64 MiB payload, joins
 * them into one new buffer, and the transport then copies that into the receive's buffer, about
 * a quarter of tcp's throughput. After the upgrade the Node channel reads the socket itself: this
 * decoder passes each frame's payload bytes on as they arrive, the transport's `FrameReader`
 * writes them straight into the destination (`directTarget`: every plain Node socket, dialed or
 * accepted, reads into it with `onread`, no copy at all; [Note: reading an accepted socket in
 * place]), and a browser's masked payload is unmasked there in place, a word at a time; nothing
 * is joined. What the protocol requires stays: a
 * server refuses unmasked frames and a client masked ones, control frames (close, ping, pong) may
 * come between the fragments of a message and are answered, reserved bits and unknown opcodes
 * are protocol errors (close code 1002), and no extension is ever negotiated, so no frame is
 * compressed (`permessage-deflate` stays off by construction).
 */

export const Opcode = {
  continuation: 0,
  text: 1,
  binary: 2,
  close: 8,
  ping: 9,
  pong: 10,
} as const;

/** What the decoder reports. */
export interface WebSocketEvents {
  /** A data message begins; `length` when it is one unfragmented frame. */
  messageStart(binary: boolean, length: number | undefined): void;
  /** The next payload bytes of the current message, unmasked (a view the callee must not keep). */
  messageBytes(chunk: Uint8Array): void;
  messageEnd(): void;
  /** A whole control frame (close, ping, pong), unmasked. */
  control(opcode: number, payload: Uint8Array): void;
  /** The peer broke the protocol; nothing more is decoded. */
  protocolError(code: number, reason: string): void;
  /** Where the current message's next `min` or more bytes may be read to directly, or null. */
  directTarget(min: number): Uint8Array | null;
  /** `n` bytes were read into the view `directTarget` gave (unmasked already). */
  directDone(n: number): void;
}

const MAX_HEAD_BYTES = 14;
const MAX_CONTROL_PAYLOAD = 125;

/** The 4-byte mask as one native-endian word, rotated to start `offset` bytes into it. */
const maskWordBytes = new Uint8Array(4);
const maskWord = new Uint32Array(maskWordBytes.buffer);

/**
 * XORs `bytes` with `mask` in place, starting `offset` bytes into the frame's payload: byte by
 * byte up to a 4-byte boundary of the underlying buffer, then a 32-bit word at a time with the
 * mask rotated to that phase (built in the machine's byte order, so no endianness is assumed),
 * then the tail. A browser masks every frame it sends with a random key, so this is the Node
 * side's one pass over a browser's payload, done where the bytes already are.
 */
export function unmask(bytes: Uint8Array, mask: Uint8Array, offset: number): void {
  const n = bytes.byteLength;
  const lead = Math.min(n, (4 - (bytes.byteOffset & 3)) & 3);
  let i = 0;
  for (; i < lead; i++) bytes[i] = bytes[i]! ^ mask[(offset + i) & 3]!;
  const words = (n - i) >>> 2;
  if (words > 0) {
    for (let k = 0; k < 4; k++) maskWordBytes[k] = mask[(offset + i + k) & 3]!;
    const word = maskWord[0]!;
    const view = new Uint32Array(bytes.buffer, bytes.byteOffset + i, words);
    for (let w = 0; w < words; w++) view[w] = view[w]! ^ word;
    i += words * 4;
  }
  for (; i < n; i++) bytes[i] = bytes[i]! ^ mask[(offset + i) & 3]!;
}

/**
 * The head of one final frame of `opcode` carrying `length` bytes. A client's frames must be
 * masked: its mask is zero, so the payload goes out as it is (no copy, no XOR pass).
 */
export function frameHead(opcode: number, length: number, masked: boolean): Uint8Array {
  const extra = length < 126 ? 0 : length < 0x1_0000 ? 2 : 8;
  const head = new Uint8Array(2 + extra + (masked ? 4 : 0));
  head[0] = 0x80 | opcode;
  head[1] = (masked ? 0x80 : 0) | (extra === 0 ? length : extra === 2 ? 126 : 127);
  const view = new DataView(head.buffer);
  if (extra === 2) view.setUint16(2, length);
  if (extra === 8) {
    view.setUint32(2, Math.floor(length / 0x1_0000_0000));
    view.setUint32(6, length >>> 0);
  }
  return head;
}

/** A close frame's payload: the code, then the reason in UTF-8. */
export function closePayload(code: number, reason = ''): Uint8Array {
  const text = new TextEncoder().encode(reason);
  const payload = new Uint8Array(2 + text.byteLength);
  new DataView(payload.buffer).setUint16(0, code);
  payload.set(text, 2);
  return payload;
}

type State = 'head' | 'payload' | 'control' | 'failed';

/** Decodes a stream of WebSocket frames (see [Note: reading WebSocket frames ourselves]). */
export class WebSocketFrameDecoder {
  private state: State = 'head';
  private readonly head = new Uint8Array(MAX_HEAD_BYTES);
  private headFilled = 0;
  private headNeeded = 2;
  private readonly mask = new Uint8Array(4);
  private masking = false;
  private maskOffset = 0;
  private opcode = 0;
  private fin = false;
  private remaining = 0;
  /** A fragmented data message is in progress. */
  private inMessage = false;
  private control = new Uint8Array(0);
  private controlFilled = 0;
  private direct: Uint8Array | null = null;
  /** Payload bytes read straight into a destination (`readBuffer`'s direct views). */
  bytesInPlace = 0;

  /** `masked`: frames must be masked (this end is the server). */
  constructor(
    private readonly events: WebSocketEvents,
    private readonly masked: boolean,
  ) {}

  /** Consumes `bytes` (unmasking them in place). */
  push(bytes: Uint8Array): void {
    let pos = 0;
    const end = bytes.byteLength;
    while (pos < end) {
      switch (this.state) {
        case 'failed':
          return;
        case 'head': {
          const n = Math.min(this.headNeeded - this.headFilled, end - pos);
          this.head.set(bytes.subarray(pos, pos + n), this.headFilled);
          this.headFilled += n;
          pos += n;
          if (this.headFilled === this.headNeeded) this.onHeadBytes();
          break;
        }
        case 'payload': {
          const n = Math.min(this.remaining, end - pos);
          const piece = bytes.subarray(pos, pos + n);
          pos += n;
          this.payload(piece);
          break;
        }
        case 'control': {
          const n = Math.min(this.control.byteLength - this.controlFilled, end - pos);
          this.control.set(bytes.subarray(pos, pos + n), this.controlFilled);
          this.controlFilled += n;
          pos += n;
          if (this.controlFilled === this.control.byteLength) this.endFrame();
          break;
        }
      }
    }
  }

  /**
   * The buffer a socket should read into next: the destination itself while a long payload is
   * being read (bounded to this frame, so no other frame's bytes land there), else `scratch`.
   */
  readBuffer(scratch: Uint8Array, min: number): Uint8Array {
    this.direct = null;
    if (this.state !== 'payload' || this.remaining < min) return scratch;
    const target = this.events.directTarget(min);
    if (target === null) return scratch;
    const view = target.subarray(0, Math.min(target.byteLength, this.remaining));
    if (view.byteLength < min) return scratch;
    this.direct = view;
    return view;
  }

  /** `n` bytes were read into `buffer`, which `readBuffer` returned. */
  afterRead(buffer: Uint8Array, n: number): void {
    const direct = this.direct;
    this.direct = null;
    if (direct === null || buffer !== direct || this.state !== 'payload') {
      this.push(buffer.subarray(0, n));
      return;
    }
    if (this.masking) unmask(direct.subarray(0, n), this.mask, this.maskOffset);
    this.bytesInPlace += n;
    this.maskOffset += n;
    this.remaining -= n;
    this.events.directDone(n);
    if (this.remaining === 0) this.endFrame();
  }

  private payload(piece: Uint8Array): void {
    if (this.masking) unmask(piece, this.mask, this.maskOffset);
    this.maskOffset += piece.byteLength;
    this.remaining -= piece.byteLength;
    this.events.messageBytes(piece);
    if (this.remaining === 0) this.endFrame();
  }

  private fail(code: number, reason: string): void {
    this.state = 'failed';
    this.events.protocolError(code, reason);
  }

  private onHeadBytes(): void {
    const b1 = this.head[1]!;
    if (this.headFilled === 2) {
      const len7 = b1 & 0x7f;
      this.headNeeded = 2 + (len7 === 126 ? 2 : len7 === 127 ? 8 : 0) + (b1 & 0x80 ? 4 : 0);
      if (this.headNeeded > 2) return;
    }
    this.headFilled = 0;
    this.headNeeded = 2;
    const problem = this.startFrame(this.head[0]!, b1);
    if (problem !== null) {
      this.fail(problem[0], problem[1]);
      return;
    }
    if (this.remaining === 0) this.endFrame();
  }

  /** Takes in a whole frame head; returns the close code and reason when it breaks the protocol. */
  private startFrame(b0: number, b1: number): [number, string] | null {
    this.fin = (b0 & 0x80) !== 0;
    this.opcode = b0 & 0x0f;
    const masked = (b1 & 0x80) !== 0;
    const view = new DataView(this.head.buffer);
    let length = b1 & 0x7f;
    let at = 2;
    if (length === 126) {
      length = view.getUint16(2);
      at = 4;
    } else if (length === 127) {
      const high = view.getUint32(2);
      if (high >= 1 << 21) return [1009, 'payload length beyond 2^53 - 1'];
      length = high * 0x1_0000_0000 + view.getUint32(6);
      at = 10;
    }
    if ((b0 & 0x70) !== 0) return [1002, 'RSV bits must be clear'];
    if (masked !== this.masked)
      return [1002, this.masked ? 'MASK must be set' : 'MASK must be clear'];
    this.mask.set(masked ? this.head.subarray(at, at + 4) : [0, 0, 0, 0]);
    this.masking = masked && (this.mask[0]! | this.mask[1]! | this.mask[2]! | this.mask[3]!) !== 0;
    this.maskOffset = 0;
    this.remaining = length;
    const op = this.opcode;
    if (op >= Opcode.close) {
      if (op > Opcode.pong) return [1002, `invalid opcode ${op}`];
      if (!this.fin) return [1002, 'FIN must be set on a control frame'];
      if (length > MAX_CONTROL_PAYLOAD) return [1002, 'control frame too long'];
      this.control = new Uint8Array(length);
      this.controlFilled = 0;
      this.state = 'control';
      return null;
    }
    if (op === Opcode.continuation) {
      if (!this.inMessage) return [1002, 'continuation frame outside a message'];
      this.state = 'payload';
      return null;
    }
    if (op !== Opcode.text && op !== Opcode.binary) return [1002, `invalid opcode ${op}`];
    if (this.inMessage) return [1002, 'new message inside a fragmented one'];
    this.inMessage = true;
    this.state = 'payload';
    this.events.messageStart(op === Opcode.binary, this.fin ? length : undefined);
    return null;
  }

  private endFrame(): void {
    const wasControl = this.state === 'control';
    this.state = 'head';
    if (wasControl) {
      if (this.masking) unmask(this.control, this.mask, 0);
      this.events.control(this.opcode, this.control);
    } else if (this.fin) {
      this.inMessage = false;
      this.events.messageEnd();
    }
  }
}
