import { RendezvousError } from './errors.js';
import type { StoreClient } from './store-client.js';

/**
 * Reads what rank `rank` published under `key` (its address), waiting at most `timeoutMs`; a rank
 * that never publishes is named in the error (`missingRanks`).
 */
export async function publishedBy(
  store: StoreClient,
  key: string,
  rank: number,
  timeoutMs: number,
  op: string,
): Promise<string> {
  try {
    return await store.get(key, timeoutMs);
  } catch (error) {
    if (!(error instanceof RendezvousError) || error.code !== 'E_TIMEOUT') throw error;
    throw new RendezvousError(
      op,
      `rank ${rank} never published its address within ${timeoutMs} ms (did it start, with the same token?)`,
      { rank: store.rank, code: 'E_TIMEOUT', missingRanks: [rank], cause: error },
    );
  }
}
