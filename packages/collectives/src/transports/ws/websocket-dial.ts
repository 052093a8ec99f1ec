import { createHash, randomBytes } from 'node:crypto';
import { isIP, connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { WebSocketChannel } from './websocket-channel.js';

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
/** The server's upgrade response may not be longer than this. */
const MAX_RESPONSE_BYTES = 16 << 10;
const SCRATCH_BYTES = 16 << 10;

/** `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key` (RFC 6455 section 4.2.2). */
export function acceptKey(key: string): string {
  return createHash('sha1')
    .update(key + GUID)
    .digest('base64');
}

/** The headers of an HTTP response head (lower-case names), or null when it is not one. */
function parseResponse(text: string): { status: number; headers: Map<string, string> } | null {
  const lines = text.split('\r\n');
  const status = /^HTTP\/1\.1 (\d{3})/.exec(lines[0] ?? '');
  if (status === null) return null;
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon > 0)
      headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  return { status: Number(status[1]), headers };
}

/**
 * Opens a WebSocket to `url` (`ws://` or `wss://`, trusting `ca` when given) and resolves once the
 * upgrade checks out. A plain socket reads with `onread`, so payloads can land in their
 * destination straight from the kernel ([Note: reading WebSocket frames ourselves]).
 */
export function dialWebSocket(
  url: string,
  options: { ca?: string | Buffer | (string | Buffer)[]; maxMessageBytes: number },
): Promise<WebSocketChannel> {
  const parsed = new URL(url);
  const secure = parsed.protocol === 'wss:';
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = Number(parsed.port) || (secure ? 443 : 80);
  const key = randomBytes(16).toString('base64');
  return new Promise((resolve, reject) => {
    let channel: WebSocketChannel | null = null;
    let response = Buffer.alloc(0);
    const scratch = Buffer.allocUnsafe(SCRATCH_BYTES);
    const fail = (error: Error) => {
      socket.destroy();
      reject(error);
    };
    const onHandshakeBytes = (bytes: Uint8Array) => {
      response = Buffer.concat([response, bytes]);
      const end = response.indexOf('\r\n\r\n');
      if (end < 0) {
        if (response.byteLength > MAX_RESPONSE_BYTES) fail(new Error('upgrade response too long'));
        return;
      }
      const head = parseResponse(response.subarray(0, end).toString('latin1'));
      if (head === null || head.status !== 101) {
        fail(new Error(`Unexpected server response: ${head?.status ?? 'not HTTP'}`));
        return;
      }
      if (head.headers.get('upgrade')?.toLowerCase() !== 'websocket') {
        fail(new Error('Invalid Upgrade header'));
        return;
      }
      if (head.headers.get('sec-websocket-accept') !== acceptKey(key)) {
        fail(new Error('Invalid Sec-WebSocket-Accept header'));
        return;
      }
      if (head.headers.has('sec-websocket-extensions')) {
        fail(new Error('Server sent a Sec-WebSocket-Extensions header but none was requested'));
        return;
      }
      const opened = new WebSocketChannel(socket, true, options.maxMessageBytes);
      channel = opened;
      const rest = response.subarray(end + 4);
      response = Buffer.alloc(0);
      resolve(opened);
      if (rest.byteLength > 0) opened.push(rest);
    };
    const socket: Socket = secure
      ? tlsConnect({
          host,
          port,
          ...(isIP(host) === 0 ? { servername: host } : {}),
          ...(options.ca === undefined ? {} : { ca: options.ca }),
        })
      : netConnect({
          host,
          port,
          onread: {
            buffer: () => channel?.readBuffer() ?? scratch,
            callback: (nread: number, buffer: Uint8Array) => {
              if (nread <= 0) return true;
              if (channel !== null) channel.afterRead(buffer, nread);
              else onHandshakeBytes(buffer.subarray(0, nread));
              return true;
            },
          },
        });
    if (secure) {
      socket.on('data', (chunk: Buffer) => {
        if (channel !== null) channel.push(chunk);
        else onHandshakeBytes(chunk);
      });
    }
    socket.setNoDelay(true);
    socket.once('error', (error) => {
      if (channel === null) reject(error);
    });
    socket.once('close', () => {
      if (channel === null) reject(new Error(`connection to ${url} closed during the upgrade`));
    });
    socket.once(secure ? 'secureConnect' : 'connect', () => {
      const path = `${parsed.pathname}${parsed.search}`;
      socket.write(
        `GET ${path} HTTP/1.1\r\nHost: ${parsed.host}\r\nUpgrade: websocket\r\n` +
          `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
      );
    });
  });
}
