import { afterAll, beforeAll, describe } from 'vitest';
import type { Backend, BackendKind } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { BackendError } from '../errors.js';
import { type BackendFactory, backendFactories } from './backends.js';

/** What a suite of `describeBackends` sees. */
export interface BackendContext {
  readonly kind: BackendKind;
  /** The backend under test; available inside tests and hooks (not while declaring them). */
  readonly backend: Backend;
  /** Float dtypes this backend supports (f64 on the CPU only). */
  readonly floatDTypes: readonly DType[];
}

const created = new Map<string, Promise<Backend>>();

function selectedFactories(): BackendFactory[] {
  const filter = (typeof process !== 'undefined' && process.env.WEBSHARD_BACKENDS) || '';
  const wanted = filter
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  return backendFactories.filter(
    (f) =>
      (wanted.length === 0 || wanted.includes(f.name) || wanted.includes(f.kind)) && f.available(),
  );
}

/**
 * Declare `suite` once per available backend, as `describe('<title> [<kind>]')`. WebGPU suites are
 * skipped where no adapter is likely, or throw with the reason under `WEBSHARD_REQUIRE_WEBGPU=1`
 * (see [Note: requiring WebGPU in tests]). The backend is
 * created once per test file and kind (before the suite's tests) and shared by its suites; a suite
 * that changes backend-wide state (a memory limit) should create its own backend.
 */
export function describeBackends(title: string, suite: (ctx: BackendContext) => void): void {
  for (const factory of selectedFactories()) {
    describe(`${title} [${factory.name}]`, () => {
      let backend: Backend | undefined;
      beforeAll(async () => {
        let pending = created.get(factory.name);
        if (!pending) {
          pending = Promise.resolve(factory.create());
          created.set(factory.name, pending);
        }
        backend = await pending;
      });
      afterAll(async () => {
        await backend?.sync();
      });
      const ctx: BackendContext = {
        kind: factory.kind,
        get backend(): Backend {
          if (!backend) {
            throw new BackendError(
              'describeBackends',
              `the ${factory.name} backend is created in beforeAll: use ctx.backend inside tests and hooks`,
            );
          }
          return backend;
        },
        floatDTypes:
          factory.kind === 'cpu' ? ['f32', 'f16', 'bf16', 'f64'] : ['f32', 'f16', 'bf16'],
      };
      suite(ctx);
    });
  }
}
