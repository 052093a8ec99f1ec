import { describe, expect, it } from 'vitest';
import { arenaHeaderBytes, createShmHandle } from './shm-layout.js';

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
    // 384 header bytes + 3 sets x 3 ranks x 40000 = 360384 bytes: 6 pages of 64 KiB.
    expect(arenaHeaderBytes(3)).toBe(384);
    expect(handle.arena.buffer.byteLength).toBe(6 * 65536);
    // At least 64 bytes per rank, so a reduce-scatter round carries a piece of every shard.
    expect(createShmHandle(4, { slotBytes: 16 }).slotBytes).toBe(256);
  });
});
