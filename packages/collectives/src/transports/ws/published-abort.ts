import type { AbortReason } from '../../errors.js';
import type { StoreClient } from '../../rendezvous/store-client.js';
import { validReason } from '../framed/hello.js';

/** How long a rank looks up a lost peer's published abort reason before blaming the peer. */
const BLAME_LOOKUP_MS = 500;

/** The store key where a `ws` rank publishes its abort reason. */
export function abortKey(prefix: string, rank: number): string {
  return `${prefix}/abort/${rank}`;
}

/**
 * [Note: blaming a rank that left]
 * A rank that aborts (it saw a death, a deadline, a mismatch) sends its reason to its peers in
 * abort frames and also puts it in the store under `<prefix>/abort/<rank>`, before it closes
 * anything; closing waits (at most 500 ms) for both to leave. A rank that then sees that rank's
 * connection close (or the store report it lost) looks the key up before blaming it: when the
 * leaver published a reason, that reason (which names the rank that really failed) is the
 * group's, as if its abort frame had arrived. The leaver wrote the key before it closed, so the
 * look-up finds it; a rank that died without a word has no key, and is blamed after one store
 * round trip. Without the look-up a survivor that left at once was sometimes named in place of
 * the rank that died (#20 item 4): its abort frame can lose the race with its closing
 * connection. A send or receive naming the lost peer waits for the look-up, so it rejects with
 * the same reason. Where the store itself is gone (rank 0 left), the look-up fails and the
 * leaver is blamed.
 */
export async function publishedReason(
  store: StoreClient,
  prefix: string,
  rank: number,
): Promise<AbortReason | null> {
  const key = abortKey(prefix, rank);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const lookUp = (async () => {
    if (!(await store.check([key]))) return null;
    return validReason(JSON.parse(await store.get(key, BLAME_LOOKUP_MS)));
  })();
  const deadline = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), BLAME_LOOKUP_MS);
  });
  try {
    return await Promise.race([lookUp, deadline]);
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}
