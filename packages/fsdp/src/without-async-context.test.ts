// Two FSDP ranks in one thread where there is no AsyncLocalStorage, as in a browser page: the test
// hides `node:async_hooks` from tensor-core before it loads (vitest runs each file in a fresh module
// graph), so its context slots fall back to what a browser has ([Note: async context]). Before the
// running backward was handed to hooks ([Note: the running backward]) this failed at the first
// backward with a CollectiveMismatchError. The same run in Chromium: src/browser-ranks.test.ts.
import { vi } from 'vitest';

vi.hoisted(() => {
  const proc = process as { getBuiltinModule?: (id: string) => unknown };
  const original = proc.getBuiltinModule?.bind(process);
  proc.getBuiltinModule = (id: string) =>
    id === 'node:async_hooks' || id === 'async_hooks' ? undefined : original?.(id);
});

import { asyncContextSupported } from '@webshard/tensor-core/autograd';
import { describe, expect, it } from 'vitest';
import { expectParity } from './test-support/expect-parity.js';
import { trainLocal, trainSingle } from './test-support/parity.js';

const RUN = { steps: 3, batch: 8 };

describe('FSDP ranks sharing a thread without AsyncLocalStorage (a browser page)', () => {
  it('runs without async context here', () => {
    expect(asyncContextSupported).toBe(false);
  });

  for (const nested of [false, true]) {
    it(`2 ranks, ${nested ? 'nested' : 'flat'}: train as the single-process reference`, async () => {
      const reference = await trainSingle(RUN);
      const results = await trainLocal(2, { ...RUN, nested });
      expectParity(results, reference, 1e-5);
    });
  }
});
