import { describe, expect, it, vi } from 'vitest';
import { newRunId } from './run-id.js';

describe('newRunId', () => {
  it('is a version-4 UUID, different each time', () => {
    const ids = new Set(Array.from({ length: 100 }, newRunId));
    expect(ids.size).toBe(100);
    for (const id of ids)
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('needs no crypto.randomUUID (a page outside a secure context has none)', () => {
    const spy = vi.spyOn(globalThis.crypto, 'randomUUID').mockImplementation(() => {
      throw new TypeError('globalThis.crypto.randomUUID is not a function');
    });
    try {
      expect(newRunId()).toHaveLength(36);
    } finally {
      spy.mockRestore();
    }
  });
});
