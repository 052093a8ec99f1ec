// Runs in a headless Chromium page (src/browser-ranks.test.ts): two FSDP ranks in the page's one
// thread over the `local` transport, flat and nested, and the single-process reference, each
// trained a few steps. The page has no AsyncLocalStorage: each rank's end-of-backward work reaches
// its own backward because the engine hands it to FSDP's hooks ([Note: the running backward]).
import { asyncContextSupported } from '@webshard/tensor-core/autograd';
import { type ParityResult, trainLocal, trainSingle } from './parity.js';

/** A result as plain JSON: params by name as arrays. */
export interface PlainResult {
  readonly losses: number[];
  readonly params: Record<string, number[]>;
}

function plain(result: ParityResult): PlainResult {
  const params: Record<string, number[]> = {};
  for (const [name, values] of result.params) params[name] = Array.from(values);
  return { losses: result.losses, params };
}

const RUN = { steps: 3, batch: 8 };

async function run(): Promise<object> {
  const reference = plain(await trainSingle(RUN));
  const flat = (await trainLocal(2, { ...RUN, nested: false })).map(plain);
  const nested = (await trainLocal(2, { ...RUN, nested: true })).map(plain);
  return { asyncContextSupported, reference, flat, nested };
}

run().then(
  (result) => {
    (window as unknown as { outcome: unknown }).outcome = { result };
  },
  (error: Error) => {
    (window as unknown as { outcome: unknown }).outcome = {
      error: `${error.name}: ${error.message}\n${error.stack}`,
    };
  },
);
