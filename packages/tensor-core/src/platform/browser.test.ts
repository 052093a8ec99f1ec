import { describe, expect, it } from 'vitest';
import { NodeRequiredError } from '../errors.js';
import { importDawn, loadThreads, nodeFs, RUNTIME } from './browser.js';

describe('#platform in a browser bundle', () => {
  it('file io is a NodeRequiredError naming the op and the browser alternative', async () => {
    expect(RUNTIME).toBe('browser');
    const error = await nodeFs('loadSafetensors').catch((e: unknown) => e);
    expect(NodeRequiredError.isInstance(error)).toBe(true);
    expect((error as NodeRequiredError).op).toBe('loadSafetensors');
    expect((error as Error).message).toBe(
      '[loadSafetensors] needs Node: a page has no file system; fetch the bytes and call decodeSafetensors / encodeSafetensors instead',
    );
  });

  it('the Dawn package is never loaded', async () => {
    const error = await importDawn().catch((e: unknown) => e);
    expect(NodeRequiredError.isInstance(error)).toBe(true);
  });

  it('has worker threads only where the page is cross-origin isolated', async () => {
    // Node's globals have no crossOriginIsolated: as a page that is not isolated, one thread.
    expect(await loadThreads()).toBeNull();
    const scope = globalThis as { crossOriginIsolated?: boolean };
    scope.crossOriginIsolated = true;
    try {
      const threads = await loadThreads();
      // Node 20 has a global Worker only behind a flag: without one there is still no pool.
      if (typeof (globalThis as { Worker?: unknown }).Worker === 'undefined') {
        expect(threads).toBeNull();
      } else {
        expect(threads).toMatchObject({ isMainThread: true, canBlock: false });
      }
    } finally {
      delete scope.crossOriginIsolated;
    }
  });
});
