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
 * `[name, shard]` of every flat parameter of `units` (each with its path from the unit asked):
 * `<path>.flat_param_<i>`, or, unflattened, where a flat parameter holds one parameter, that
 * parameter's name, as fairscale names them.
 */
export function namedShards(
  units: readonly (readonly [
    string,
    {
      readonly options: { readonly flattenParameters: boolean };
      readonly flatParameters: readonly FlatParameter[];
    },
  ])[],
): [string, Tensor][] {
  const out: [string, Tensor][] = [];
  for (const [path, unit] of units) {
    const prefix = cleanPath(path);
    const dot = prefix === '' ? '' : `${prefix}.`;
    unit.flatParameters.forEach((flat, i) => {
      const own = unit.options.flattenParameters ? undefined : flat.entries[0]?.names[0];
      out.push([`${dot}${own ?? `flat_param_${i}`}`, flat.shard]);
    });
  }
  return out;
}
