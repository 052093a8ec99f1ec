import { describe, expect, it } from 'vitest';
import { RegisteredMemoryError } from '../../errors.js';
import {
  arenaAllocatorWord,
  segmentPages,
  arenaHeaderBytes,
  arenaRegisteredStart,
  createShmHandle,
} from './shm-layout.js';
import { joinShm } from './join-shm.js';

describe('createShmHandle', () => {
  it('spins 30 us with a core per rank, 2 us when ranks share cores, or as told', () => {
    expect(createShmHandle(2).spinMicros).toBe(30);
    expect(createShmHandle(2, { cores: 2 }).spinMicros).toBe(30);
    expect(createShmHandle(4, { cores: 2 }).spinMicros).toBe(2);
    expect(createShmHandle(4, { cores: 2, spinMicros: 40 }).spinMicros).toBe(40);
    expect(createShmHandle(2, { spinMicros: 0 }).spinMicros).toBe(0);
  });

  it('sizes the arena for the header and three sets of per-rank slots, rounded to 64 bytes', () => {
    expect(createShmHandle(3, { slotBytes: 1000 }).slotBytes).toBe(960);
    const handle = createShmHandle(3, { slotBytes: 40_000 });
    expect(handle.slotBytes).toBe(40_000);
    // 384 bytes of exchange slots and the allocator's 64-byte line, then 3 sets x 3 ranks x 40000
    // = 360448 bytes: 6 pages of 64 KiB. Registered buffers start right after the slots.
    expect(arenaHeaderBytes(3)).toBe(448);
    expect(handle.arena.buffer.byteLength).toBe(6 * 65536);
    const words = new Int32Array(handle.arena.buffer);
    expect(words[arenaAllocatorWord(3)]! * 64).toBe(arenaRegisteredStart(3, 40_000));
    expect(arenaRegisteredStart(3, 40_000)).toBe(360_448);
    // At least 64 bytes per rank, so a reduce-scatter round carries a piece of every shard.
    expect(createShmHandle(4, { slotBytes: 16 }).slotBytes).toBe(256);
  });
});

describe('registered buffers in the arena', () => {
  it('grow the shared memory as they are allocated and fail with a RegisteredMemoryError past the reserve', () => {
    // Both ranks attach in this thread: allocation needs no peer, only the shared allocator word.
    const handle = createShmHandle(2, { slotBytes: 4096, registeredBytes: 3 * 65536 });
    const [zero, one] = [0, 1].map((rank) => joinShm(handle, rank));
    const before = handle.arena.buffer.byteLength;
    const a = zero!.allocate('f32', 20_000); // 80000 bytes: past the slots, so the memory grows
    const b = one!.allocate('i32', 10);
    expect(a.byteOffset).toBe(arenaRegisteredStart(2, 4096));
    expect(b.byteOffset).toBe(a.byteOffset + 80_000);
    expect(handle.arena.buffer.byteLength).toBeGreaterThan(before);
    expect(handle.segments).toEqual([]);
    expect(() => zero!.allocate('f32', 65536)).toThrow(RegisteredMemoryError);
    expect(() => zero!.allocate('f32', 65536)).toThrow(
      /^\[allocate\] rank 0: 262144 bytes of registered memory cannot be had: the world's 0\.0001\d* GiB of registered memory are spent \(\d+ bytes committed by the world\)\. Raise the shm handle's registeredBytes/,
    );
  });

  it('reserve segments of 2 GiB past the arena for the registered bytes asked for, empty until used', () => {
    const handle = createShmHandle(2, { slotBytes: 4096, registeredBytes: 5 * 2 ** 30 });
    expect(handle.segments?.map((s) => s.buffer.byteLength)).toEqual([65536, 65536]);
    expect(segmentPages(5 * 16384 - 32767)).toEqual([32768, 16387]);
    // The default: 32 GiB, the arena and 16 more segments (each holds 2 GiB less its first page).
    expect(createShmHandle(2).segments).toHaveLength(16);
  });
});
