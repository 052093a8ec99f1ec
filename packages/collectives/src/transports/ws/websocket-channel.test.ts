import { afterEach, describe, expect, it } from 'vitest';
import type { Channel, Listener, MessageReader } from './channel.js';
import type { WebSocketChannel } from './websocket-channel.js';
import { nodeChannels } from './ws-node.js';

/**
 * Both ends of a Node WebSocket channel read a large payload straight into its destination:
 * the end that dialed (a socket it made with `onread`) and the end an HTTP server accepted
 * ([Note: reading an accepted socket in place]). Each channel counts the payload bytes the kernel
 * wrote into a destination; bytes that went through a scratch buffer or a 'data' event do not
 * count.
 */

/** A message reader that keeps one message in a buffer of its announced length. */
function collector() {
  let target = new Uint8Array(0);
  let filled = 0;
  let resolveMessage: (bytes: Uint8Array) => void = () => {};
  const messages: Promise<Uint8Array>[] = [];
  const next = () => {
    messages.push(
      new Promise((resolve) => {
        resolveMessage = resolve;
      }),
    );
  };
  next();
  const reader: MessageReader = {
    begin(_binary, length) {
      target = new Uint8Array(length ?? 0);
      filled = 0;
    },
    bytes(chunk) {
      target.set(chunk, filled);
      filled += chunk.byteLength;
    },
    end() {
      const done = resolveMessage;
      next();
      done(target);
    },
    directTarget(min) {
      return target.byteLength - filled >= min ? target.subarray(filled) : null;
    },
    advanceDirect(n) {
      filled += n;
    },
  };
  return { reader, message: (index: number) => messages[index]! };
}

function pattern(size: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(size);
  for (let i = 0; i < size; i++) bytes[i] = (i * 31 + seed) & 0xff;
  return bytes;
}

let listener: Listener | null = null;
const channels: Channel[] = [];
afterEach(async () => {
  for (const channel of channels.splice(0)) channel.destroy();
  await listener?.close();
  listener = null;
});

describe('Node WebSocket channels', () => {
  it('read a large payload into its destination on the dialed and the accepted end', async () => {
    const factory = nodeChannels();
    let accepted: (channel: Channel) => void = () => {};
    const acceptedChannel = new Promise<Channel>((resolve) => {
      accepted = resolve;
    });
    listener = await factory.listen!('127.0.0.1', 64 << 20, (channel) => accepted(channel));
    const dialed = (await factory.dial(listener.url)) as WebSocketChannel;
    channels.push(dialed);
    // The accepted end sees the dialer only once a message arrives; the first one is whole.
    const hello = Uint8Array.of(1, 2, 3);
    dialed.send(hello);
    const server = (await acceptedChannel) as WebSocketChannel;
    channels.push(server);
    const first = await new Promise<Uint8Array | string>((resolve) => {
      server.onMessage = resolve;
    });
    expect(first).toEqual(hello);
    // As the transport does once a hello checks out: no longer a stranger.
    server.authenticated?.();

    const toServer = collector();
    const toClient = collector();
    server.stream(toServer.reader);
    dialed.stream(toClient.reader);
    const size = 8 << 20;
    const up = pattern(size, 1);
    const down = pattern(size, 2);
    dialed.send(up);
    server.send(down);
    const [gotUp, gotDown] = await Promise.all([toServer.message(0), toClient.message(0)]);
    expect(Buffer.compare(gotUp, up)).toBe(0);
    expect(Buffer.compare(gotDown, down)).toBe(0);
    // Only a frame's first bytes (those read with its head) and reads of under 16 KiB go
    // through scratch.
    expect(server.bytesReadInPlace).toBeGreaterThan(size * 0.9);
    expect(dialed.bytesReadInPlace).toBeGreaterThan(size * 0.9);
  });

  it('closes the accepted end when the dialer goes, and the listener still closes', async () => {
    const factory = nodeChannels();
    let accepted: (channel: Channel) => void = () => {};
    const acceptedChannel = new Promise<Channel>((resolve) => {
      accepted = resolve;
    });
    listener = await factory.listen!('127.0.0.1', 1 << 20, (channel) => accepted(channel));
    const dialed = await factory.dial(listener.url);
    dialed.send(Uint8Array.of(7));
    const server = await acceptedChannel;
    const closed = new Promise<string>((resolve) => {
      server.onClose = resolve;
    });
    dialed.destroy();
    expect(await closed).toMatch(/its WebSocket closed/);
    // The HTTP server counted the connection: closing it must not wait for a socket left behind.
    await listener.close();
    listener = null;
  });
});
