import { ArgumentError } from '@webshard/tensor-core';
import { type AbortReason, TransportAbortedError } from '../errors.js';
import type { StoreClient } from '../rendezvous/store-client.js';
import type { OpStamp } from '../op-stamp.js';
import type { Transport } from '../transport-contract.js';
import { nextTurn } from '../transports/progress-turn.js';
import { LINK_PRESETS } from './link-presets.js';

const noop = () => {};

/** A simulated link: what `LinkShaper` adds to every message between two ranks. */
export interface LinkSettings {
  /** One-way latency in milliseconds (default 0). */
  readonly latencyMs?: number;
  /** Bandwidth of each direction of each link in Gbit/s (default: unlimited). */
  readonly gbitPerSecond?: number;
  /** Probability that a packet is lost (default 0); each loss costs a retransmission. */
  readonly loss?: number;
  /** Bytes per packet for the loss model (default 1460, a TCP segment of a 1500-byte MTU). */
  readonly packetBytes?: number;
  /** The least time a retransmission takes, in ms (default 1; a lost packet waits max(2 x latency, this)). */
  readonly minRetransmitMs?: number;
  /** Seed of the losses (default 1), so a run can be repeated. */
  readonly seed?: number;
}

/** Milliseconds on a clock every thread and process of this machine shares. */
function now(): number {
  return performance.timeOrigin + performance.now();
}

/**
 * Wakes waiters at their due times (`now()` clock) with one timer for all of them, so many
 * receives in flight cost one timer, not one each. In Node and in a tab alike. Never early; how
 * late depends on `coarse` ([Note: the shaper's clock]).
 */
class DueQueue {
  private readonly waiters: { at: number; wake: () => void }[] = [];
  /** The pending timer and the time it fires at, or null (a poll by `setImmediate` or nothing). */
  private timer: { handle: ReturnType<typeof setTimeout>; at: number } | null = null;
  private polling = false;

  /** `coarse`: timers only, up to about a millisecond late; else polls the last 2 ms. */
  constructor(private readonly coarse: boolean) {}

  wait(at: number): Promise<void> {
    return new Promise((wake) => {
      const index = this.waiters.findIndex((w) => w.at > at);
      if (index < 0) this.waiters.push({ at, wake });
      else this.waiters.splice(index, 0, { at, wake });
      this.arm();
    });
  }

  private tick = (): void => {
    this.timer = null;
    this.polling = false;
    const time = now();
    while (this.waiters.length > 0 && this.waiters[0]!.at <= time) this.waiters.shift()!.wake();
    this.arm();
  };

  private arm(): void {
    if (this.polling || this.waiters.length === 0) return;
    const at = this.waiters[0]!.at;
    if (this.timer !== null) {
      if (this.timer.at <= at - (this.coarse ? 0 : 1)) return;
      clearTimeout(this.timer.handle);
      this.timer = null;
    }
    const left = at - now();
    if (this.coarse && left > 0) {
      // A timer of whole milliseconds that may fire a little early (Node's timers count from
      // the event loop's cached time): `tick` arms again for what is left, at least 1 ms.
      const ms = Math.max(1, Math.ceil(left));
      this.timer = { handle: setTimeout(this.tick, ms), at };
    } else if (left > 2) {
      this.timer = { handle: setTimeout(this.tick, left - 1), at: at - 1 };
    } else {
      this.polling = true;
      nextTurn(this.tick);
    }
  }
}

/**
 * [Note: the shaper's clock]
 * A shaped receive completes at its due time, which a timer cannot hit: Node's and the browsers'
 * timers are whole milliseconds and fire late. On a link of under `COARSE_LATENCY_MS` one way
 * (`datacenter`: 50 us) a millisecond is many latencies, so the queue sets its timer 1 ms short
 * and polls the last stretch with turns of the event loop. On a slower link it uses timers only
 * and a receive completes up to about a millisecond late (2.5 % of `broadband-20`'s 40 ms):
 * polling there spun the process's thread for the last 1-2 ms of every message, on the cores the
 * ranks compute on. In a streamed DiLoCo run of 4 process ranks on 2 cores (bench/diloco-quick.ts,
 * a fragment always in flight) every inner step took 2.5 ms (12 %) longer on broadband-20 than
 * over loopback with polling, and none longer without: the emulator's cost, not the link's.
 */
export const COARSE_LATENCY_MS = 5;

/**
 * Parses `WEBSHARD_LINK`-style settings: comma-separated `latency=1ms` (or `us`), `bandwidth=10gbit`
 * (or `mbit`), `loss=0.001`, `seed=N`, or a preset's name (`broadband-20`, [Note: link presets])
 * that later settings override; empty or `none` means no shaping. A bad value is an
 * `ArgumentError` naming it.
 */
export function parseLinkSettings(text: string): LinkSettings | null {
  const trimmed = text.trim();
  if (trimmed === '' || trimmed === 'none') return null;
  const settings: { -readonly [K in keyof LinkSettings]: LinkSettings[K] } = {};
  for (const part of trimmed.split(',')) {
    const [name, raw = ''] = part.split('=').map((s) => s.trim());
    const bad = () =>
      new ArgumentError(
        'link',
        `cannot read '${part}' in '${text}' (latency=1ms,bandwidth=10gbit,loss=0.001, or a preset: ${Object.keys(LINK_PRESETS).join(', ')})`,
      );
    if (!part.includes('=') && name !== undefined && Object.hasOwn(LINK_PRESETS, name)) {
      Object.assign(settings, LINK_PRESETS[name]);
      continue;
    }
    const number = (value: string) => {
      const parsed = Number(value);
      if (value === '' || !Number.isFinite(parsed) || parsed < 0) throw bad();
      return parsed;
    };
    if (name === 'latency') {
      const match = /^([0-9.]+)(ms|us)$/.exec(raw);
      if (match === null) throw bad();
      settings.latencyMs = number(match[1]!) / (match[2] === 'us' ? 1000 : 1);
    } else if (name === 'bandwidth') {
      const match = /^([0-9.]+)(gbit|mbit)$/.exec(raw);
      if (match === null) throw bad();
      settings.gbitPerSecond = number(match[1]!) / (match[2] === 'mbit' ? 1000 : 1);
      if (settings.gbitPerSecond === 0) throw bad();
    } else if (name === 'loss') {
      settings.loss = number(raw);
      if (settings.loss >= 1) throw bad();
    } else if (name === 'seed') {
      settings.seed = number(raw);
    } else {
      throw bad();
    }
  }
  return settings;
}

/**
 * The link every rank of a world uses: this rank's (`link`, else `WEBSHARD_LINK`), checked against
 * rank 0's through the store, since a shaped rank and an unshaped one cannot talk (the shaper adds
 * a stamp to every message). Null when there is none.
 */
export async function agreedLink(
  store: StoreClient,
  rank: number,
  link: LinkSettings | string | undefined,
  timeoutMs: number,
): Promise<LinkSettings | null> {
  const given = link ?? (typeof process !== 'undefined' ? process.env.WEBSHARD_LINK : undefined);
  const settings = typeof given === 'string' ? parseLinkSettings(given) : (given ?? null);
  const text = JSON.stringify(settings);
  if (rank === 0) await store.set('two-level/link', text);
  const rank0 = await store.get('two-level/link', timeoutMs);
  if (rank0 !== text) {
    throw new ArgumentError(
      'initProcessGroup',
      `rank ${rank} simulates the link ${text} but rank 0 simulates ${rank0}: set WEBSHARD_LINK alike on every node`,
    );
  }
  return settings;
}

/** Per destination: when its link is free again, and the last delivery time (in order). */
interface LinkState {
  free: number;
  lastDelivery: number;
}

/**
 * [Note: the link shaper]
 * A `Transport` wrapper that makes the messages to each peer arrive as if over a link of the given
 * latency, bandwidth and loss (one link per pair of ranks and direction: the L ranks of a node
 * that talk to L peers have L links, as with one NIC per rank; a node sharing one NIC would see
 * 1/L of the bandwidth per rank): to plan a job past one machine on one machine (two `webshard-run`s
 * as two nodes). The sender keeps a clock per link: a message departs when the link is free
 * (`free`), occupies it for its bytes at the bandwidth, and is due at the receiver one latency
 * later, plus, for each packet the seeded loss model drops, a retransmission (max(2 x latency,
 * `minRetransmitMs`)); due times never go backwards (TCP delivers in order, so a loss stalls the
 * messages behind it too). The due time travels as an 8-byte stamp just ahead of the message on the
 * same tag, and the receiver resolves the receive only once it is due. The bytes themselves cross
 * the real medium at once, so a sender's buffer is free as soon as the real send says so (as a NIC
 * that copied it would), and the shaped link is never faster than the real one: on loopback between
 * two processes of this machine about 1-2 GB/s, so settings above some 10 Gbit/s measure the
 * machine, not the link. A receive completes late on purpose, but the arrival hint (rule 9) comes when the bytes are in place, so a group posts its
next receives as it would unshaped. Every rank must shape alike (`agreedLink` checks it).
 */
export class LinkShaper implements Transport {
  readonly kind: string;
  private readonly links = new Map<number, LinkState>();
  private readonly bytesPerMs: number;
  private readonly due: DueQueue;
  private random: number;

  constructor(
    private readonly inner: Transport,
    private readonly settings: LinkSettings,
  ) {
    this.kind = inner.kind;
    const gbit = settings.gbitPerSecond ?? Number.POSITIVE_INFINITY;
    this.bytesPerMs = (gbit * 1e9) / 8 / 1000;
    this.random = (settings.seed ?? 1) >>> 0 || 1;
    this.due = new DueQueue((settings.latencyMs ?? 0) >= COARSE_LATENCY_MS);
  }

  get rank(): number {
    return this.inner.rank;
  }
  get size(): number {
    return this.inner.size;
  }
  get abortReason(): AbortReason | null {
    return this.inner.abortReason;
  }

  /** Uniform in [0, 1) from a xorshift32 stream. */
  private uniform(): number {
    let x = this.random;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.random = x >>> 0;
    return this.random / 4294967296;
  }

  /** When a message of `bytes` sent now to `peer` is due there. */
  private dueAt(peer: number, bytes: number): number {
    const latency = this.settings.latencyMs ?? 0;
    let link = this.links.get(peer);
    if (link === undefined) {
      link = { free: 0, lastDelivery: 0 };
      this.links.set(peer, link);
    }
    const start = Math.max(now(), link.free);
    link.free = start + bytes / this.bytesPerMs;
    let at = link.free + latency;
    const loss = this.settings.loss ?? 0;
    if (loss > 0) {
      const packets = Math.max(1, Math.ceil(bytes / (this.settings.packetBytes ?? 1460)));
      // Losses among `packets` packets: each costs a retransmission round.
      const retransmit = Math.max(2 * latency, this.settings.minRetransmitMs ?? 1);
      const lostAny = 1 - (1 - loss) ** packets;
      if (this.uniform() < lostAny) {
        const expected = Math.max(1, Math.round(packets * loss));
        at += expected * retransmit;
      }
    }
    at = Math.max(at, link.lastDelivery);
    link.lastDelivery = at;
    return at;
  }

  /** The due time and the message both carry the message's op stamp ([Note: op stamps]). */
  send(peer: number, tag: number, data: Uint8Array, op?: OpStamp): Promise<void> {
    const stamp = new Float64Array([this.dueAt(peer, data.byteLength)]);
    const stamped = this.inner.send(peer, tag, new Uint8Array(stamp.buffer), op);
    stamped.catch(() => {});
    return Promise.all([stamped, this.inner.send(peer, tag, data, op)]).then(() => {});
  }

  /** Rule 11 of [Note: the transport contract], passed on with the due-time message
   * that goes ahead of each message. */
  expect(peer: number, tag: number, stamp: OpStamp, bytes: number, messages: number): () => void {
    return this.inner.expect?.(peer, tag, stamp, bytes + 8 * messages, 2 * messages) ?? noop;
  }

  async recv(
    peer: number,
    tag: number,
    dst: Uint8Array,
    onArrive?: () => void,
    op?: OpStamp,
  ): Promise<void> {
    const stamp = new Float64Array(1);
    const stamped = this.inner.recv(peer, tag, new Uint8Array(stamp.buffer), undefined, op);
    // The hint when the bytes are in `dst` (the group posts its next receives then); the promise
    // when the message is due.
    const received = this.inner.recv(peer, tag, dst, onArrive, op);
    stamped.catch(() => {});
    received.catch(() => {});
    await stamped;
    await received;
    const at = stamp[0]!;
    if (at <= now()) return;
    // A receive waiting for its due time still fails at once with an abort (rule 5).
    await new Promise<void>((resolve, reject) => {
      const off = this.inner.onAbort((reason) => reject(new TransportAbortedError(reason)));
      void this.due.wait(at).then(() => {
        off();
        resolve();
      });
    });
  }

  abort(reason: AbortReason): void {
    this.inner.abort(reason);
  }
  onAbort(listener: (reason: AbortReason) => void): () => void {
    return this.inner.onAbort(listener);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

/** `transport` with its links shaped by `settings`. */
export function shapeLink(transport: Transport, settings: LinkSettings): Transport {
  return new LinkShaper(transport, settings);
}
