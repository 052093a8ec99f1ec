import { performance } from 'node:perf_hooks';
import { ArgumentError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { TransportAbortedError } from '../errors.js';
import { ProcessGroup } from '../process-group.js';
import { createLocalTransports } from '../transports/local/local-transport.js';
import { LinkShaper, parseLinkSettings } from './link-shaper.js';

describe('parseLinkSettings', () => {
  it('reads latency, bandwidth, loss and seed', () => {
    expect(parseLinkSettings('latency=1ms,bandwidth=10gbit,loss=0.001,seed=7')).toEqual({
      latencyMs: 1,
      gbitPerSecond: 10,
      loss: 0.001,
      seed: 7,
    });
    expect(parseLinkSettings('latency=100us, bandwidth=500mbit')).toEqual({
      latencyMs: 0.1,
      gbitPerSecond: 0.5,
    });
    expect(parseLinkSettings('')).toBeNull();
    expect(parseLinkSettings('none')).toBeNull();
  });

  it('reads the presets, which later settings override', () => {
    expect(parseLinkSettings('datacenter')).toEqual({ latencyMs: 0.05, gbitPerSecond: 10 });
    expect(parseLinkSettings('broadband-100')).toEqual({ latencyMs: 20, gbitPerSecond: 0.1 });
    expect(parseLinkSettings('broadband-20')).toEqual({ latencyMs: 40, gbitPerSecond: 0.02 });
    expect(parseLinkSettings('mobile')).toEqual({
      latencyMs: 60,
      gbitPerSecond: 0.01,
      loss: 0.001,
    });
    expect(parseLinkSettings('broadband-20,loss=0.01,seed=3')).toEqual({
      latencyMs: 40,
      gbitPerSecond: 0.02,
      loss: 0.01,
      seed: 3,
    });
    expect(() => parseLinkSettings('broadband-50')).toThrow(
      "[link] cannot read 'broadband-50' in 'broadband-50' (latency=1ms,bandwidth=10gbit,loss=0.001, or a preset: datacenter, broadband-100, broadband-20, mobile)",
    );
  });

  it('shapes a broadband-20 link: 50 kB take 20 ms on the wire plus 40 ms of latency', async () => {
    const [a, b] = shaped(2, 'broadband-20');
    const got = new Uint8Array(50_000);
    const start = performance.now();
    await a!.send(1, 0, new Uint8Array(50_000).fill(3));
    await b!.recv(0, 0, got);
    const ms = performance.now() - start;
    expect(ms).toBeGreaterThanOrEqual(59);
    // Generous: a loaded machine delays timers, never makes them early.
    expect(ms).toBeLessThan(59 + 2000);
    expect(got.every((x) => x === 3)).toBe(true);
  });

  it('names the part it cannot read', () => {
    for (const bad of ['latency=1', 'bandwidth=0gbit', 'loss=1', 'jitter=1ms', 'loss=-0.1']) {
      expect(() => parseLinkSettings(bad)).toThrow(ArgumentError);
    }
    expect(() => parseLinkSettings('latency=1s')).toThrow(
      "[link] cannot read 'latency=1s' in 'latency=1s' (latency=1ms,bandwidth=10gbit,loss=0.001, or a preset: datacenter, broadband-100, broadband-20, mobile)",
    );
  });
});

function shaped(size: number, settings: Parameters<typeof parseLinkSettings>[0]) {
  return createLocalTransports(size).map((t) => new LinkShaper(t, parseLinkSettings(settings)!));
}

describe('LinkShaper', () => {
  it('delivers a message one latency plus its bytes at the bandwidth later, in order', async () => {
    const [a, b] = shaped(2, 'latency=20ms,bandwidth=0.08gbit');
    // 0.08 Gbit/s is 10 kB per ms: 100 kB take 10 ms on the wire, then 20 ms of latency.
    const data = new Uint8Array(100_000).fill(7);
    const got = new Uint8Array(100_000);
    const small = new Uint8Array(4);
    const start = performance.now();
    await Promise.all([a!.send(1, 0, data), a!.send(1, 0, new Uint8Array(4).fill(9))]);
    await b!.recv(0, 0, got);
    const first = performance.now() - start;
    await b!.recv(0, 0, small);
    expect(first).toBeGreaterThanOrEqual(29);
    // Generous: a loaded machine delays timers, never makes them early.
    expect(first).toBeLessThan(29 + 2000);
    expect(got.every((x) => x === 7)).toBe(true);
    expect([...small]).toEqual([9, 9, 9, 9]);
  });

  it('waits out a slow link with timers: the thread stays idle between due times, none early', async () => {
    // 200 messages of 2 kB on broadband-20 (2.5 kB per ms): due one after another every 0.8 ms
    // from 40 ms to 200 ms. Polling the last 2 ms of each wait kept the event loop busy nearly
    // the whole time (utilization 0.84 here); timers leave it idle most of it.
    const [a, b] = shaped(2, 'broadband-20');
    const count = 200;
    const start = performance.now();
    const sends = Array.from({ length: count }, (_, i) =>
      a!.send(1, 0, new Uint8Array(2000).fill(i % 251)),
    );
    const before = performance.eventLoopUtilization();
    const done: number[] = [];
    const got = Array.from({ length: count }, () => new Uint8Array(2000));
    await Promise.all([
      ...sends,
      ...got.map((dst, i) => b!.recv(0, 0, dst).then(() => (done[i] = performance.now() - start))),
    ]);
    const used = performance.eventLoopUtilization(before).utilization;
    console.log(`200 shaped receives on broadband-20: event loop utilization ${used.toFixed(2)}`);
    expect(used).toBeLessThan(0.5);
    // Never early: the k-th is due 40 ms plus k + 1 messages' 0.8 ms on the wire after its send.
    for (let i = 0; i < count; i++) {
      expect(got[i]!.every((x) => x === i % 251)).toBe(true);
      expect(done[i]!).toBeGreaterThanOrEqual(40 + 0.8 * (i + 1) - 0.5);
    }
  });

  it('makes an all-reduce wait for the link, with the right result', async () => {
    const slow = shaped(2, 'latency=15ms').map((t) => ProcessGroup.fromTransport(t));
    const run = async (groups: ProcessGroup[]) => {
      const start = performance.now();
      const data = groups.map((g) => Float32Array.from([g.rank + 1, 2]));
      await Promise.all(groups.map((g, i) => g.allReduce(data[i]!).wait()));
      return { ms: performance.now() - start, data };
    };
    const shapedRun = await run(slow);
    expect(shapedRun.data.map((d) => [...d])).toEqual([
      [3, 4],
      [3, 4],
    ]);
    // The fingerprint and the data each cross the link: at least one latency (local transports
    // deliver at once without the shaper).
    expect(shapedRun.ms).toBeGreaterThanOrEqual(14);
  });

  it('adds retransmissions for lost packets, repeatably from the seed', async () => {
    const time = async (settings: string) => {
      const [a, b] = shaped(2, settings);
      const start = performance.now();
      for (let i = 0; i < 20; i++) {
        await Promise.all([
          a!.send(1, 0, new Uint8Array(1460)),
          b!.recv(0, 0, new Uint8Array(1460)),
        ]);
      }
      return performance.now() - start;
    };
    const clean = await time('latency=0.1ms');
    // Every packet lost once: each of the 20 messages (sent one after another) takes its latency
    // of 2.5 ms plus one retransmission of 2 x 2.5 ms; without the losses 20 x 2.4 ms more.
    const lossy = await time('latency=2.5ms,loss=0.9999');
    expect(lossy - clean).toBeGreaterThanOrEqual(20 * (2.5 + 5 - 0.1) - 20);
  });

  it('fails a receive waiting for its due time at once when the transport aborts', async () => {
    const [a, b] = shaped(2, 'latency=5000ms');
    await a!.send(1, 0, new Uint8Array(4));
    const pending = b!.recv(0, 0, new Uint8Array(4));
    setTimeout(() => b!.abort({ kind: 'user', origin: 1, message: 'stop' }), 20);
    const start = performance.now();
    await expect(pending).rejects.toBeInstanceOf(TransportAbortedError);
    expect(performance.now() - start).toBeLessThan(1000);
  });
});
