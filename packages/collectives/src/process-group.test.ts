import { describe, expect, it } from 'vitest';
import { CollectiveTimeoutError, GroupAbortedError } from './errors.js';
import { ProcessGroup } from './process-group.js';
import type { Transport } from './transport-contract.js';
import { createLocalGroups, createLocalTransports } from './transports/local/local-transport.js';

describe('ProcessGroup tags', () => {
  it('gives sub-groups unsigned 32-bit tags, as the transport contract says', () => {
    const [world] = createLocalGroups(1);
    const tags = Array.from({ length: 64 }, () => world!.newGroup([0])!.tag);
    expect(world!.tag).toBe(0);
    for (const tag of tags) {
      expect(Number.isInteger(tag)).toBe(true);
      expect(tag).toBeGreaterThanOrEqual(1);
      expect(tag).toBeLessThan(2 ** 32);
      expect(tag % 2).toBe(1);
    }
    // FNV-1a hashes with the top bit set are common: they must stay positive, not wrap to int32.
    expect(tags.some((tag) => tag >= 2 ** 31)).toBe(true);
    expect(new Set(tags).size).toBe(tags.length);
    // FNV-1a of '/0' is 0x9fd2622b (odd already): above 2^31, where `hash | 1` alone is negative.
    expect(tags[0]).toBe(0x9fd2622b);
  });
});

describe('ProcessGroup direct all-reduce', () => {
  it('sizes its staging for every rank’s whole operand (64 KiB on 4 ranks as the first op)', async () => {
    const size = 4;
    const count = 16384; // 64 KiB: under the default smallMessageBytes, so direct exchange
    const groups = createLocalGroups(size);
    const inputs = groups.map((_, r) =>
      Float32Array.from({ length: count }, (_, i) => ((i * 7 + r * 13) % 101) - 50),
    );
    const expected = Float32Array.from({ length: count }, (_, i) =>
      inputs.reduce((acc, input) => Math.fround(acc + input[i]!), 0),
    );
    await Promise.all(groups.map((group, r) => group.allReduce(inputs[r]!).wait()));
    for (const input of inputs) expect(input).toEqual(expected);
    await Promise.all(groups.map((group) => group.close()));
  });
});

describe('ProcessGroup reduceScatter', () => {
  it('reduces correctly when the output is a view overlapping the input', async () => {
    // 16-element ring segments and no direct exchange, so the ring reads the input piece by piece.
    const groups = createLocalGroups(2, { segmentBytes: 64, smallMessageBytes: 0 });
    const count = 96;
    const inputs = groups.map((_, r) =>
      Float32Array.from({ length: count }, (_, i) => i * (r + 1) + 0.5),
    );
    // Rank 0's shard is [0, 48); its output starts 8 elements into its own input.
    const outputs = [inputs[0]!.subarray(8, 56), new Float32Array(48)];
    const expected = [0, 1].map((r) =>
      Float32Array.from({ length: 48 }, (_, i) => {
        const at = r * 48 + i;
        return Math.fround(Math.fround(at + 0.5) + Math.fround(at * 2 + 0.5));
      }),
    );
    await Promise.all(
      groups.map((group, r) => group.reduceScatter(inputs[r]!, outputs[r]!).wait()),
    );
    expect(Array.from(outputs[0]!)).toEqual(Array.from(expected[0]!));
    expect(Array.from(outputs[1]!)).toEqual(Array.from(expected[1]!));
    await Promise.all(groups.map((group) => group.close()));
  });
});

describe('ProcessGroup deadline backstop', () => {
  it('settles an op at its deadline even when the transport never rejects its receive', async () => {
    const [zero, one] = createLocalTransports(2);
    // Rank 1's receives hang forever, abort or not: a transport that breaks rule 5 of its contract.
    const stuck: Transport = new Proxy(one!, {
      get(target, key, receiver) {
        if (key === 'recv') return () => new Promise<void>(() => {});
        const value = Reflect.get(target, key, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const groups = [
      ProcessGroup.fromTransport(zero!, { timeoutMs: 200 }),
      ProcessGroup.fromTransport(stuck, { timeoutMs: 200 }),
    ];
    const started = performance.now();
    const results = await Promise.allSettled(
      groups.map((group) => group.allReduce(new Float32Array(8).fill(1)).wait()),
    );
    const elapsed = performance.now() - started;
    // Rank 1 times out (its receives never complete); rank 0 got everything it needed from rank 1.
    const errors = results.map((r) => (r.status === 'rejected' ? (r.reason as Error) : null));
    expect(errors[1]).toBeInstanceOf(CollectiveTimeoutError);
    expect(errors[1]!.message).toBe(
      '[allReduce] rank 1 (seq 0): timed out after 200 ms waiting for rank 0',
    );
    expect(errors[0]).toBeNull();
    expect(elapsed).toBeLessThan(5000);
    // The abort reached rank 0 too: both groups refuse further use.
    for (const group of groups)
      await expect(group.barrier().wait()).rejects.toBeInstanceOf(GroupAbortedError);
    await Promise.all(groups.map((group) => group.close()));
  });
});

describe('ProcessGroup.allocate', () => {
  it('gives ordinary zeroed arrays where there is no shared arena, and names bad counts', async () => {
    const groups = createLocalGroups(2);
    const f32 = groups[0]!.allocate('f32', 5);
    const i32 = groups[0]!.allocate('i32', 3);
    const bf16 = groups[0]!.allocate('bf16', 4);
    expect(f32).toEqual(new Float32Array(5));
    expect(i32).toEqual(new Int32Array(3));
    expect(bf16).toEqual(new Uint16Array(4));
    expect(f32.buffer).toBeInstanceOf(ArrayBuffer);
    groups[0]!.free(f32);
    expect(() => groups[0]!.allocate('f32', -1)).toThrow(
      '[allocate] count must be a non-negative integer, got -1',
    );
    await Promise.all(groups.map((group) => group.close()));
  });
});

describe('ProcessGroup ring segments', () => {
  /** Local groups whose transports record the largest message each rank sent. */
  function recordingGroups(size: number, options: { segmentBytes?: number } = {}) {
    const largest = new Array<number>(size).fill(0);
    const groups = createLocalTransports(size).map((transport) => {
      const send = transport.send.bind(transport);
      transport.send = (peer, tag, data, stamp) => {
        largest[transport.rank] = Math.max(largest[transport.rank]!, data.byteLength);
        return send(peer, tag, data, stamp);
      };
      return ProcessGroup.fromTransport(transport, options);
    });
    return { groups, largest };
  }

  // [Note: ring segments and window]: 5M i32 elements (20 MiB) are 10 MiB chunks on two ranks.
  const count = 5 << 20;
  const inputs = [0, 1].map((r) => Int32Array.from({ length: count }, (_, i) => i * (r + 3)));
  const expected = Int32Array.from({ length: count }, (_, i) => i * 3 + i * 4);
  /** The first element that differs, or -1 (toEqual is slow on millions of elements). */
  const firstDifference = (a: Int32Array, b: Int32Array) => a.findIndex((v, i) => v !== b[i]);

  it('grow by default to an eighth of a large chunk (2 MiB here), with exact results', async () => {
    const { groups, largest } = recordingGroups(2);
    const data = inputs.map((input) => input.slice());
    await Promise.all(groups.map((group, r) => group.allReduce(data[r]!).wait()));
    for (const result of data) expect(firstDifference(result, expected)).toBe(-1);
    expect(largest).toEqual([2 << 20, 2 << 20]);
    const gathered = groups.map(() => new Int32Array(count));
    await Promise.all(
      groups.map((group, r) =>
        group
          .allGather(expected.subarray(r * (count / 2), (r + 1) * (count / 2)), gathered[r]!)
          .wait(),
      ),
    );
    for (const result of gathered) expect(firstDifference(result, expected)).toBe(-1);
    expect(largest).toEqual([2 << 20, 2 << 20]);
    await Promise.all(groups.map((group) => group.close()));
  });

  it('keep the size given as segmentBytes', async () => {
    const { groups, largest } = recordingGroups(2, { segmentBytes: 1 << 20 });
    const data = inputs.map((input) => input.slice());
    await Promise.all(groups.map((group, r) => group.allReduce(data[r]!).wait()));
    for (const result of data) expect(firstDifference(result, expected)).toBe(-1);
    expect(largest).toEqual([1 << 20, 1 << 20]);
    await Promise.all(groups.map((group) => group.close()));
  });
});
