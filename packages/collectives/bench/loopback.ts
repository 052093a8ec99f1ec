// The floor under any all-reduce over loopback TCP from Node, measured in the bench's own run: two
// processes exchange `bytes` both ways at once, each doing nothing else. As in the tcp transport,
// each side reads (with `onread`, straight into a preallocated destination) from the connection it
// dialed and writes one preallocated buffer on the connection it accepted. A 2-rank all-reduce of S bytes
// must move S/2 each way twice (reduce-scatter, then all-gather), so S / (2 x this time) bounds
// its busbw whatever the schedule. Run as a script, this file is the child end.
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';

/** One end: sends `bytes`, waits for `bytes` from the other end, and times each round. */
class ExchangeEnd {
  private readonly payload: Buffer;
  private readonly destination: Buffer;
  private received = 0;
  private round = 0;
  private sent = 0;
  private started = 0;
  private readonly times: number[] = [];
  private finish: (medianMs: number) => void = () => {};
  readonly done = new Promise<number>((resolve) => {
    this.finish = resolve;
  });
  send: Socket | null = null;

  constructor(
    private readonly bytes: number,
    private readonly warmup: number,
    private readonly rounds: number,
  ) {
    this.payload = Buffer.alloc(bytes, 1);
    this.destination = Buffer.alloc(bytes);
  }

  /** Sends this round's payload, once (the peer's bytes may complete a round before 'go'). */
  start(): void {
    if (this.sent > this.round) return;
    this.sent++;
    this.started = performance.now();
    this.send!.write(this.payload);
  }

  onBytes(n: number): void {
    this.received += n;
    if (this.received < this.bytes) return;
    this.received -= this.bytes;
    if (this.round >= this.warmup) this.times.push(performance.now() - this.started);
    this.round++;
    if (this.round < this.rounds) {
      this.start();
      return;
    }
    this.times.sort((a, b) => a - b);
    this.finish(this.times[Math.floor(this.times.length / 2)] ?? Number.NaN);
  }

  /** Dials `port` and reads from it into one reused buffer. */
  dial(port: number): Socket {
    return connect({
      port,
      host: '127.0.0.1',
      noDelay: true,
      onread: {
        // Straight into a destination of the message's size, as the tcp transport receives.
        buffer: () => this.destination.subarray(this.received),
        callback: (n: number) => {
          this.onBytes(n);
          return true;
        },
      },
    });
  }
}

async function listen(): Promise<{ server: Server; port: number; accepted: Promise<Socket> }> {
  const server = createServer();
  const accepted = once(server, 'connection').then(([s]) => s as Socket);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, port: (server.address() as { port: number }).port, accepted };
}

/** The median ms of one exchange of `bytes` each way between this process and a child process. */
export async function loopbackExchangeMs(bytes: number, warmup = 3, iterations = 15) {
  const end = new ExchangeEnd(bytes, warmup, warmup + iterations);
  const { server, port, accepted } = await listen();
  const child = fork(
    fileURLToPath(import.meta.url),
    [String(port), String(bytes), String(warmup + iterations)],
    {
      execArgv: ['--import', 'tsx'],
    },
  );
  const [childPort] = (await once(child, 'message')) as [number];
  const read = end.dial(childPort);
  if (read.connecting) await once(read, 'connect');
  end.send = await accepted;
  end.send.setNoDelay(true);
  // Both ends hold both sockets before either sends.
  child.send('go');
  await once(child, 'message');
  end.start();
  const ms = await end.done;
  await once(child, 'exit');
  read.destroy();
  end.send.destroy();
  server.close();
  return ms;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [parentPort, bytes, rounds] = process.argv.slice(2).map(Number) as [number, number, number];
  const end = new ExchangeEnd(bytes, 0, rounds);
  const { server, port, accepted } = await listen();
  const read = end.dial(parentPort);
  process.send!(port);
  await once(process, 'message');
  end.send = await accepted;
  end.send.setNoDelay(true);
  if (read.connecting) await once(read, 'connect');
  process.send!('ready');
  end.start();
  await end.done;
  // Our last payload may still be in flight: end (flush) it rather than destroy it.
  await new Promise<void>((resolve) => end.send!.end(resolve));
  read.destroy();
  server.close();
  process.disconnect();
}
