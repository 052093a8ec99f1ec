// Runs in a dedicated worker of a headless Chromium page (src/ssd/opfs-store.test.ts): the OPFS
// store's contract, then one rank trained with ssdOffload in OPFS against the same in memory. One
// rank is enough for the store; two ranks sharing a page's thread are src/browser-ranks.test.ts
// (they failed at the first backward until the engine handed the running backward to FSDP's
// hooks, [Note: the running backward]).
import { OpfsStore } from '../ssd/opfs-store.js';
import { trainLocal } from './parity.js';

async function caught(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'no error';
  } catch (error) {
    return `${(error as Error).name}: ${(error as Error).message}`;
  }
}

async function run(): Promise<object> {
  const store = await OpfsStore.open('fsdp-opfs-test');
  const bytes = new Uint8Array(1000).map((_, i) => (i * 31 + 7) & 255);
  await store.write('a', new Uint8Array(1000));
  await store.write('a', bytes);
  const back = new Uint8Array(1000);
  await store.read('a', back);
  const roundTrip = back.every((b, i) => b === bytes[i]);
  const stats = store.stats();
  const wrongSize = await caught(store.read('a', new Uint8Array(12)));
  const missing = await caught(store.read('never', new Uint8Array(4)));
  const badKey = await caught(store.write('../x', bytes));
  await store.remove('a');
  const removed = await caught(store.read('a', back));
  store.resetStats();
  const run = { steps: 2, batch: 8, nested: true };
  const inMemory = await trainLocal(1, run).catch((e: Error) => {
    throw new Error(`in memory: ${e.message}`);
  });
  // OPFS files open asynchronously: the step goes through stepOffloaded, not optimizer.step()
  // ([Note: the optimizer's own step through a store]).
  const stepped = { ...run, stepOffloaded: true };
  const offloaded = await trainLocal(1, stepped, { ssdOffload: { store } }).catch((e: Error) => {
    throw new Error(`ssdOffload: ${e.message}`);
  });
  const same = inMemory.every(
    (r, i) =>
      JSON.stringify(r.losses) === JSON.stringify(offloaded[i]!.losses) &&
      [...r.params].every(([name, v]) => {
        const o = offloaded[i]!.params.get(name)!;
        return o.length === v.length && v.every((x, j) => Object.is(x, o[j]));
      }),
  );
  return { roundTrip, stats, wrongSize, missing, badKey, removed, same, io: store.stats() };
}

run().then(
  (result) => postMessage({ result }),
  (error: Error) => postMessage({ error: `${error.name}: ${error.message}\n${error.stack}` }),
);
