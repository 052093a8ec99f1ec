import { describe, expect, it } from 'vitest';
import { FreeLists } from './registered-memory.js';

describe('FreeLists', () => {
  it('hands out the smallest free range that fits, splitting it, and merges neighbours', () => {
    const free = new FreeLists();
    expect(free.take(64)).toBeUndefined();
    free.put(0, 1024);
    free.put(4096, 256);
    free.put(8192, 512);
    // Best fit: the 256-byte range, split.
    expect(free.take(128)).toBe(4096);
    expect(free.take(128)).toBe(4224);
    expect(free.take(512)).toBe(8192);
    expect(free.take(512)).toBe(0);
    expect(free.freeBytes).toBe(512);
    // Freed neighbours merge into one range on both sides: 0-512, then 512-1024 free already.
    free.put(0, 512);
    expect(free.take(1024)).toBe(0);
    free.put(4224, 128);
    free.put(4096, 128);
    free.put(4352, 64);
    expect(free.take(320)).toBe(4096);
    expect(free.freeBytes).toBe(0);
    expect(FreeLists.sizeOf(0)).toBe(64);
    expect(FreeLists.sizeOf(65)).toBe(128);
  });
});
