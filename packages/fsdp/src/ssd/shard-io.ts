import { Tensor } from '@webshard/tensor-core';
import { CpuBackend, hostArrayOf } from '@webshard/tensor-core/backend';
import { FsdpConfigError } from '../errors.js';
import type { FlatParameter } from '../flat-param.js';
import type { ShardStore } from './shard-store.js';

/** The tensors of one parameter's optimizer state (Adam's `expAvg`, `expAvgSq`; SGD's momentum). */
export function stateTensors(state: object): [string, Tensor][] {
  return Object.entries(state).filter((e): e is [string, Tensor] => e[1] instanceof Tensor);
}

/** Give the freed `target` fresh storage (placed as `flat`'s shards are) holding `host`. */
function revive(target: Tensor, flat: FlatParameter, host: Float32Array): void {
  const backend = target.backend;
  const buffer = flat.placement.allocate(backend, target.size, 'f32');
  try {
    backend.write(buffer.kernel('ssdOffload'), host);
    target.setData(buffer);
  } finally {
    buffer.free();
  }
}

function scaled(host: Float32Array, scale: number): Float32Array {
  if (scale !== 1) for (let i = 0; i < host.length; i++) host[i] = host[i]! * scale;
  return host;
}

/** Read `key` into the freed `target` (f32), each element multiplied by `scale`. */
export async function readInto(
  store: ShardStore,
  key: string,
  target: Tensor,
  flat: FlatParameter,
  scale = 1,
): Promise<void> {
  const host = new Float32Array(target.size);
  await store.read(key, new Uint8Array(host.buffer));
  revive(target, flat, scaled(host, scale));
}

/** Write `source`'s elements to `key`. */
export async function writeFrom(store: ShardStore, key: string, source: Tensor): Promise<void> {
  const host = (await source.read()) as Float32Array;
  await store.write(key, new Uint8Array(host.buffer, host.byteOffset, host.byteLength));
}

/**
 * `readInto` without waiting, for an optimizer's synchronous `step()` and `stateDict()` ([Note:
 * the optimizer's own step through a store]): the store must read synchronously (`readSync`).
 */
export function readIntoSync(
  op: string,
  store: ShardStore,
  key: string,
  target: Tensor,
  flat: FlatParameter,
  scale = 1,
): void {
  if (store.readSync === undefined) throw synchronousOnly(op, store, 'reads');
  const host = new Float32Array(target.size);
  store.readSync(key, new Uint8Array(host.buffer));
  revive(target, flat, scaled(host, scale));
}

/**
 * `writeFrom` without waiting: the store must write synchronously (`writeSync`) and `source` be in
 * host memory (the CPU backend), whose bytes are written in place.
 */
export function writeFromSync(op: string, store: ShardStore, key: string, source: Tensor): void {
  if (store.writeSync === undefined) throw synchronousOnly(op, store, 'writes');
  const host = hostArrayOf(source, op);
  if (host === null) throw notOnHost(op, source);
  store.writeSync(key, new Uint8Array(host.buffer, host.byteOffset, host.byteLength));
}

/**
 * Throw the `FsdpConfigError` of `readIntoSync` or `writeFromSync` now, before anything changes,
 * unless both can run for `shard` in `store`.
 */
export function checkSynchronous(op: string, store: ShardStore, shard: Tensor): void {
  if (store.readSync === undefined) throw synchronousOnly(op, store, 'reads');
  if (store.writeSync === undefined) throw synchronousOnly(op, store, 'writes');
  // hostArrayOf's condition, which a freed shard cannot be asked.
  if (!(shard.backend instanceof CpuBackend)) throw notOnHost(op, shard);
}

function notOnHost(op: string, source: Tensor): FsdpConfigError {
  return new FsdpConfigError(
    op,
    `${source.name ?? 'a shard'} is on ${source.backend.kind}, whose bytes cannot be read synchronously: call await stepOffloaded(model, optimizer) instead of optimizer.step()`,
  );
}

function synchronousOnly(op: string, store: ShardStore, what: string): FsdpConfigError {
  return new FsdpConfigError(
    op,
    `the ${store.kind} store has no synchronous ${what}: call await stepOffloaded(model, optimizer) for the step and await localOptimStateDict(model, optimizer) for the state dict`,
  );
}
