// 64 MiB one way over one Node WebSocket channel in this process, each direction in turn: read by
// the end the HTTP server accepted, then by the end that dialed ([Note: reading an accepted socket
// in place]). `tsx --conditions=@webshard/source bench/ws-one-way.ts [transfers]` prints MB/s
// per transfer (the first of each direction is warm-up).
import type { Channel, MessageReader } from '../src/transports/ws/channel.js';
import { nodeChannels } from '../src/transports/ws/ws-node.js';

const transfers = Number(process.argv[2] ?? 6);
const size = 64 << 20;

/** Keeps each message in one buffer of its length, read in place where the channel can. */
function collector(): { reader: MessageReader; next: () => Promise<void> } {
  let target = new Uint8Array(0);
  let filled = 0;
  let done: () => void = () => {};
  const reader: MessageReader = {
    begin(_binary, length) {
      if (target.byteLength !== length) target = new Uint8Array(length ?? 0);
      filled = 0;
    },
    bytes(chunk) {
      target.set(chunk, filled);
      filled += chunk.byteLength;
    },
    end: () => done(),
    directTarget: (min) => (target.byteLength - filled >= min ? target.subarray(filled) : null),
    advanceDirect(n) {
      filled += n;
    },
  };
  return {
    reader,
    next: () =>
      new Promise<void>((resolve) => {
        done = resolve;
      }),
  };
}

const factory = nodeChannels();
let accept: (channel: Channel) => void = () => {};
const acceptedChannel = new Promise<Channel>((resolve) => {
  accept = resolve;
});
const listener = await factory.listen!('127.0.0.1', 2 * size, (channel) => accept(channel));
const dialed = await factory.dial(listener.url);
dialed.send(Uint8Array.of(1));
const accepted = await acceptedChannel;
await new Promise((resolve) => {
  accepted.onMessage = resolve;
});
accepted.authenticated?.();
const toAccepted = collector();
const toDialed = collector();
accepted.stream!(toAccepted.reader);
dialed.stream!(toDialed.reader);
const data = new Uint8Array(size).fill(3);
const rates = {
  'read by the accepted end': [] as number[],
  'read by the dialed end': [] as number[],
};
for (let i = 0; i < transfers; i++) {
  for (const [name, from, to] of [
    ['read by the accepted end', dialed, toAccepted],
    ['read by the dialed end', accepted, toDialed],
  ] as const) {
    const arrived = to.next();
    const t0 = performance.now();
    from.send(data);
    await arrived;
    rates[name].push(Math.round(size / 1e3 / (performance.now() - t0)));
  }
}
for (const [name, values] of Object.entries(rates))
  console.log(`${name}: ${values.join(', ')} MB/s`);
dialed.destroy();
accepted.destroy();
await listener.close();
process.exit(0);
