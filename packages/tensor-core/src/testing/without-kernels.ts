import type { Backend } from '../backend/backend.js';

/**
 * `backend` with the optional kernels `names` missing (a proxy; every other member is the
 * backend's own, bound to it): the ops then take the path a backend without them takes, on the
 * same storage. The tests and benchmarks compare a kernel with that path this way.
 */
export function withoutKernels(backend: Backend, names: readonly (keyof Backend)[]): Backend {
  return new Proxy(backend, {
    get(target, name) {
      if ((names as readonly PropertyKey[]).includes(name)) return undefined;
      const value = Reflect.get(target, name, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
