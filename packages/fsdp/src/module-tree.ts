import { type Module, Tensor } from '@webshard/tensor-core';
import type { FlatParameter, FlatParamSource } from './flat-param.js';

/** The child name of the wrapped module; state-dict keys and unit names leave it out. */
export const WRAPPED_MODULE = '_fsdp_wrapped_module';

/** `path` with the wrapper's own segments removed: the module's name in the unwrapped model. */
export function cleanPath(path: string): string {
  return path
    .split('.')
    .filter((part) => part !== WRAPPED_MODULE)
    .join('.');
}

/**
 * The parameters of `module` that no nested unit owns (`isUnit` tells the units), each once with
 * every name it has.
 */
export function ownParameters(module: Module, isUnit: (m: Module) => boolean): FlatParamSource[] {
  const byTensor = new Map<Tensor, string[]>();
  const visit = (m: Module, prefix: string): void => {
    for (const [name, t] of m.namedParameters({ recurse: false, removeDuplicate: false })) {
      const names = byTensor.get(t);
      if (names === undefined) byTensor.set(t, [prefix + name]);
      else names.push(prefix + name);
    }
    for (const [name, child] of m.namedChildren()) {
      if (isUnit(child)) continue;
      visit(child, `${prefix}${name}.`);
    }
  };
  visit(module, '');
  return [...byTensor].map(([tensor, names]) => ({ tensor, names }));
}

/** Every unit strictly inside `module` (not crossing into their own subtrees). */
export function nestedUnits<U extends Module>(module: Module, isUnit: (m: Module) => m is U): U[] {
  const out: U[] = [];
  const visit = (m: Module): void => {
    for (const [, child] of m.namedChildren()) {
      if (isUnit(child)) out.push(child);
      else visit(child);
    }
  };
  visit(module);
  return out;
}

/** Call `fn` on every tensor in a forward's output (tensors, arrays, maps, plain objects). */
export function forEachTensor(
  value: unknown,
  fn: (t: Tensor) => void,
  seen = new Set<unknown>(),
): void {
  if (value === null || typeof value !== 'object' || seen.has(value)) return;
  seen.add(value);
  if (value instanceof Tensor) {
    fn(value);
    return;
  }
  if (Array.isArray(value)) {
    for (const v of value) forEachTensor(v, fn, seen);
    return;
  }
  if (value instanceof Map) {
    for (const v of value.values()) forEachTensor(v, fn, seen);
    return;
  }
  if (Object.getPrototypeOf(value) === Object.prototype) {
    for (const v of Object.values(value)) forEachTensor(v, fn, seen);
  }
}

/**
 * `value` with every tensor inside replaced by `fn(tensor)`: arrays, maps, sets and plain objects
 * are rebuilt (only when something inside changed), anything else is kept as it is.
 */
export function mapTensors(value: unknown, fn: (t: Tensor) => Tensor): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (value instanceof Tensor) return fn(value);
  if (Array.isArray(value)) {
    const out = value.map((v) => mapTensors(v, fn));
    return out.some((v, i) => v !== value[i]) ? out : value;
  }
  if (value instanceof Map) {
    const out = new Map([...value].map(([k, v]) => [k, mapTensors(v, fn)] as const));
    return [...out].some(([k, v]) => v !== value.get(k)) ? out : value;
  }
  if (value instanceof Set) {
    const out = [...value].map((v) => mapTensors(v, fn));
    return out.some((v, i) => v !== [...value][i]) ? new Set(out) : value;
  }
  if (Object.getPrototypeOf(value) === Object.prototype) {
    const entries = Object.entries(value).map(([k, v]) => [k, mapTensors(v, fn)] as const);
    const changed = entries.some(([k, v]) => v !== (value as Record<string, unknown>)[k]);
    return changed ? Object.fromEntries(entries) : value;
  }
  return value;
}

/**
 * [Note: the order of named shards]
 * `namedParameters()` (and so `parameters()`, which an optimizer's parameter groups and its state
 * dict follow) lists the shards in the unwrapped model's order, as fairscale's `named_parameters`
 * does: it walks the module tree in pre-order, wrappers included, and yields each shard where its
 * parameters would be. A flattened unit's `flat_param_<i>` sit where the unit is, before its
 * module's children (fairscale registers them on the flattening wrapper, the unit's first child);
 * an unflattened unit's shard, which holds one parameter, sits where the module that registers
 * that parameter is, under its name, a tied one at its first place. Listing unit by unit instead
 * put a unit's own parameters before every nested unit's (`0, 3, 1.1, 1.0, 2` for a model whose
 * order is `0, 1.0, 1.1, 2, 3`). Shard keys in local state dicts and checkpoints are
 * `<unit path>.flat_param_<i>` in unit order whatever this order is ([Note: the sharded layout]).
 */

/** What `namedShards` reads of a unit. */
export interface NamedShardsUnit {
  readonly options: { readonly flattenParameters: boolean };
  readonly flatParameters: readonly FlatParameter[];
}

/**
 * `[name, shard]` of every flat parameter of the units in `root`'s tree (only `root`'s own with
 * `recurse: false`), named `<unit path>.flat_param_<i>`, or, unflattened, where a flat parameter
 * holds one parameter, after that parameter as fairscale names them; in the unwrapped model's
 * order ([Note: the order of named shards]).
 */
export function namedShards<U extends Module & NamedShardsUnit>(
  root: U,
  isUnit: (m: Module) => m is U,
  recurse = true,
): [string, Tensor][] {
  const out: [string, Tensor][] = [];
  const emitted = new Set<FlatParameter>();
  // An unflattened unit's parameters, by the tensor its module registers: named where met.
  const byParam = new Map<Tensor, [string, FlatParameter]>();
  for (const [path, m] of root.namedModules()) {
    if (isUnit(m)) {
      if (m !== root && !recurse) continue;
      const prefix = cleanPath(path);
      const dot = prefix === '' ? '' : `${prefix}.`;
      m.flatParameters.forEach((flat, i) => {
        const own = m.options.flattenParameters ? undefined : flat.entries[0]?.names[0];
        if (own === undefined) {
          out.push([`${dot}flat_param_${i}`, flat.shard]);
          emitted.add(flat);
        } else {
          for (const e of flat.entries) byParam.set(e.param, [`${dot}${own}`, flat]);
        }
      });
      continue;
    }
    for (const [, t] of m.namedParameters({ recurse: false, removeDuplicate: false })) {
      const found = byParam.get(t);
      if (found === undefined || emitted.has(found[1])) continue;
      out.push([found[0], found[1].shard]);
      emitted.add(found[1]);
    }
  }
  // A parameter no module registers (none should be): after the others, in unit order.
  for (const [name, flat] of byParam.values()) {
    if (!emitted.has(flat)) {
      out.push([name, flat.shard]);
      emitted.add(flat);
    }
  }
  return out;
}
