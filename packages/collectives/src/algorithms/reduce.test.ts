import { describe, expect, it } from 'vitest';
import { ReduceArena } from '../kernels/reduce.js';
import { RegisteredMemory } from '../registered-memory.js';
import { shardRange } from '../shard.js';
import { type Comm, mod } from './comm.js';
import { type ReduceLayout, type ReduceMemory, ringReduce } from './reduce.js';

/**
 * Ranks in one thread whose sends read their views late: a pseudo-random number of macrotasks after
 * the call, and settle then, as a socket write does once the kernel took the bytes. Messages wait
 * for their receive as in the transports' inbox. A ring that rewrote a buffer with a send still in
 * flight delivers the new contents instead of the old.
 */
function lateComms(size: number, seed: number): Comm[] {
  interface Message {
    copy: Uint8Array | null;
  }
  const messages = new Map<string, Message[]>();
  const recvs = new Map<string, { dst: Uint8Array; settle: () => void }[]>();
  let state = seed;
  const delay = () => {
    state = (state * 1103515245 + 12345) >>> 0;
    return (state >>> 16) % 4;
  };
  const later = (n: number, fn: () => void) =>
    n === 0 ? setImmediate(fn) : setImmediate(() => later(n - 1, fn));
  const list = <T>(map: Map<string, T[]>, key: string) => {
    if (!map.has(key)) map.set(key, []);
    return map.get(key)!;
  };
  // In order: a message read late does not let the ones behind it overtake it.
  const match = (key: string) => {
    const queued = list(messages, key);
    const posted = list(recvs, key);
    while (queued.length > 0 && queued[0]!.copy !== null && posted.length > 0) {
      const recv = posted.shift()!;
      recv.dst.set(queued.shift()!.copy!);
      recv.settle();
    }
  };
  return Array.from({ length: size }, (_, rank) => ({
    rank,
    size,
    send: (peer, data) =>
      new Promise<void>((settle) => {
        const key = `${rank}>${peer}`;
        const message: Message = { copy: null };
        list(messages, key).push(message);
        later(delay(), () => {
          message.copy = data.slice();
          settle();
          match(key);
        });
      }),
    recv: (peer, dst) =>
      new Promise<void>((settle) => {
        const key = `${peer}>${rank}`;
        list(recvs, key).push({ dst, settle });
        match(key);
      }),
  }));
}

function chunkOf(count: number, size: number): (c: number) => [number, number] {
  return (c) => {
    const range = shardRange(count, size, mod(c, size));
    return [range.start, range.count];
  };
}

/** Small-integer values: their sums are exact in any order, so the reference is plain addition. */
function inputOf(rank: number, count: number): Float32Array {
  return Float32Array.from({ length: count }, (_, i) => ((i * 7 + rank * 13) % 201) - 100);
}

function expectedSum(size: number, count: number): Float32Array {
  const sum = new Float32Array(count);
  for (let rank = 0; rank < size; rank++) {
    const input = inputOf(rank, count);
    for (let i = 0; i < count; i++) sum[i]! += input[i]!;
  }
  return sum;
}

/** Two segments of staging slots, each reused several times in an op. */
function smallRing(arena: ReduceMemory, work: number): ReduceLayout {
  return { arena, op: 'sum', dtype: 'f32', work, staging: 0, segmentElements: 8, window: 2 };
}

const bytes = (a: Float32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

describe('ringReduce with sends that complete late', () => {
  for (const size of [3, 4]) {
    it(`reuses a forward slot only once its send completed (ordinary arrays, ${size} ranks)`, async () => {
      const count = 203;
      for (const seed of [1, 2, 3]) {
        const comms = lateComms(size, seed);
        const inputs = comms.map((c) => inputOf(c.rank, count));
        const outputs = comms.map((c) => new Float32Array(shardRange(count, size, c.rank).count));
        const gathered = comms.map((c) => inputOf(c.rank, count));
        await Promise.all(
          comms.map((comm) => {
            const arena = new ReduceArena();
            arena.ensure(2 * 2 * 8 * 4 + 16);
            return ringReduce(comm, smallRing(arena, -1), chunkOf(count, size), {
              input: bytes(inputs[comm.rank]!),
              result: bytes(outputs[comm.rank]!),
              resultBase: shardRange(count, size, comm.rank).start,
              gather: null,
              scale: null,
            });
          }),
        );
        // The all-reduce: input, result and gather one buffer.
        await Promise.all(
          comms.map((comm) => {
            const arena = new ReduceArena();
            arena.ensure(2 * 2 * 8 * 4 + 16);
            const all = bytes(gathered[comm.rank]!);
            return ringReduce(comm, smallRing(arena, -1), chunkOf(count, size), {
              input: all,
              result: all,
              resultBase: 0,
              gather: all,
              scale: null,
            });
          }),
        );
        const sum = expectedSum(size, count);
        for (const comm of comms) {
          const { start, count: n } = shardRange(count, size, comm.rank);
          expect(outputs[comm.rank], `seed ${seed} rank ${comm.rank}`).toEqual(
            sum.subarray(start, start + n),
          );
          expect(gathered[comm.rank], `seed ${seed} rank ${comm.rank}`).toEqual(sum);
        }
      }
    });

    it(`reuses a forward slot only once its send completed (registered input, ${size} ranks)`, async () => {
      const count = 203;
      for (const seed of [1, 2, 3]) {
        const comms = lateComms(size, seed);
        const outputs = comms.map((c) => new Float32Array(shardRange(count, size, c.rank).count));
        await Promise.all(
          comms.map((comm) => {
            const memory = new RegisteredMemory(2 * 2 * 8 * 4, comm.rank);
            const offset = memory.allocate(count * 4);
            const input = new Float32Array(memory.buffer, offset, count);
            input.set(inputOf(comm.rank, count));
            return ringReduce(comm, smallRing(memory, -1), chunkOf(count, size), {
              input: bytes(input),
              result: bytes(outputs[comm.rank]!),
              resultBase: shardRange(count, size, comm.rank).start,
              gather: null,
              scale: null,
              registered: { result: -1 },
            });
          }),
        );
        const sum = expectedSum(size, count);
        for (const comm of comms) {
          const { start, count: n } = shardRange(count, size, comm.rank);
          expect(outputs[comm.rank], `seed ${seed} rank ${comm.rank}`).toEqual(
            sum.subarray(start, start + n),
          );
        }
      }
    });
  }
});
