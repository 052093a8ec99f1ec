import { NodeRequiredError } from '@webshard/tensor-core';
import { describe, expect, it, vi } from 'vitest';
import { rendezvous } from '../rendezvous/rendezvous.js';

// Every module of this file that imports `#platform` gets the browser build, as in a page.
vi.mock('#platform', () => import('./browser.js'));

async function failure(promise: Promise<unknown>): Promise<NodeRequiredError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(NodeRequiredError.isInstance(error)).toBe(true);
  return error as NodeRequiredError;
}

describe('#platform in a browser bundle', () => {
  it('a page as rank 0 is told that a Node process must host the store', async () => {
    const error = await failure(
      rendezvous({ rank: 0, worldSize: 2, masterAddr: '127.0.0.1', masterPort: 0, token: 't' }),
    );
    expect(error.op).toBe('rendezvous');
    expect(error.message).toBe(
      '[rendezvous] needs Node: rank 0 hosts the rendezvous store, and a page cannot listen for connections: a Node process must host the store. Start rank 0 in Node (webshard-run, or initProcessGroup in a Node script) and join pages as ranks 1 to worldSize - 1, with masterAddr and masterPort naming that process',
    );
  });

  it('tcp in a page says to use ws', async () => {
    const { loadTcpTransport } = await import('./browser.js');
    const error = await failure(loadTcpTransport());
    expect(error.op).toBe('tcp');
    expect(error.message).toContain("use backend 'ws'");
  });
});
