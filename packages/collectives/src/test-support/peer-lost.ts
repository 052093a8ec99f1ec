import { expect } from 'vitest';
import { TransportAbortedError } from '../errors.js';

/** Asserts that `pending` rejects with the transport abort of rank `origin` losing rank `peer`. */
export async function expectPeerLost(
  pending: Promise<unknown>,
  origin: number,
  peer: number,
): Promise<void> {
  const error = await pending.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(TransportAbortedError);
  expect((error as TransportAbortedError).reason).toMatchObject({
    kind: 'peer-lost',
    origin,
    peer,
  });
}
