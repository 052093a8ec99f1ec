import { type Module, ModuleDict, ModuleList, type Tensor } from '@webshard/tensor-core';
import type { FsdpOptions } from './api.js';
import { FsdpConfigError } from './errors.js';
import { FullyShardedDataParallel } from './fully-sharded.js';

/**
 * Decides whether `autoWrap` makes `module` a unit of its own: called bottom-up with the number of
 * parameter elements in its subtree that no unit below it took.
 */
export type AutoWrapPolicy = (module: Module, unwrappedNumel: number) => boolean;

/**
 * Wrap every module holding at least `minNumParams` parameter elements not already in a unit below
 * it (fairscale's `default_auto_wrap_policy`). Containers (`ModuleList`, `ModuleDict`) are never
 * units of their own: their children are.
 */
export function sizeBasedAutoWrapPolicy(minNumParams = 1e8): AutoWrapPolicy {
  if (!(minNumParams >= 0)) {
    throw new FsdpConfigError(
      'sizeBasedAutoWrapPolicy',
      `minNumParams must be >= 0, got ${minNumParams}`,
    );
  }
  return (module, numel) =>
    numel >= minNumParams && !(module instanceof ModuleList) && !(module instanceof ModuleDict);
}

/** Wrap every module that is an instance of one of `classes` (a transformer block per unit). */
export function moduleClassAutoWrapPolicy(
  classes: readonly (abstract new (...args: never[]) => Module)[],
): AutoWrapPolicy {
  return (module) => classes.some((c) => module instanceof c);
}

/**
 * [Note: replacing a child with its unit]
 * tensor-core modules keep their children both in the registry (`registerModule`, which names
 * parameters and builds state dicts) and in fields their `forward` reads (`this.attn`, a
 * container's list). A wrapped child must be replaced in both, so `replaceChild` registers the unit
 * under the child's name and rewrites every own field of the parent that held the child, directly
 * or as an element of an array. The parent's `forward` must await the child (`await child.call(x)`
 * or `callAsync`): a unit's forward is async.
 */
export function replaceChild(parent: Module, name: string, child: Module, unit: Module): void {
  parent.registerModule(name, unit);
  const fields = parent as unknown as Record<string, unknown>;
  for (const key of Object.keys(fields)) {
    const value = fields[key];
    if (value === child) fields[key] = unit;
    else if (Array.isArray(value)) {
      value.forEach((v, i) => {
        if (v === child) value[i] = unit;
      });
    }
  }
}

/** The parameters of each module's subtree, for telling which ones are used outside it. */
function parameterOwners(root: Module): Map<Tensor, Set<Module>> {
  const owners = new Map<Tensor, Set<Module>>();
  for (const m of root.modules()) {
    for (const [, p] of m.namedParameters({ recurse: false, removeDuplicate: false })) {
      const set = owners.get(p) ?? new Set<Module>();
      owners.set(p, set);
      set.add(m);
    }
  }
  return owners;
}

/**
 * Wrap `module`'s descendants that `policy` picks, bottom-up, and then `module` itself (the root),
 * all with `options` (fairscale's `auto_wrap` inside `enable_wrap`). A module whose parameters are
 * also used outside its subtree (a tied weight) is not wrapped on its own, so the tie ends up in the
 * smallest unit that contains every use. Returns the root unit.
 */
export function autoWrap<Args extends unknown[], Out>(
  module: Module<Args, Out>,
  policy: AutoWrapPolicy,
  options: FsdpOptions,
): FullyShardedDataParallel<Args, Out> {
  const owners = parameterOwners(module);
  const taken = new Set<Tensor>();
  const visit = (m: Module): void => {
    for (const [name, child] of m.namedChildren()) {
      if (child instanceof FullyShardedDataParallel) continue;
      visit(child);
      const inside = new Set(child.modules());
      // Parameters a unit below already took are skipped, also when it replaced them (mixed
      // precision, another compute backend) with tensors of its own.
      const params = child.parameters().filter((p) => !taken.has(p) && owners.has(p));
      const numel = params.reduce((n, p) => n + p.size, 0);
      const escapes = params.some((p) => [...owners.get(p)!].some((o) => !inside.has(o)));
      if (escapes || !policy(child, numel)) continue;
      replaceChild(m, name, child, new FullyShardedDataParallel(child, options));
      for (const p of params) taken.add(p);
    }
  };
  visit(module);
  return new FullyShardedDataParallel(module, options);
}

const contexts: FsdpOptions[] = [];

/**
 * Run `build` (synchronous: it constructs a model) with `wrap` turned on: inside it, `wrap(module)`
 * makes a unit with `options` (fairscale's `enable_wrap`). Contexts nest; the innermost applies.
 */
export function enableWrap<T>(options: FsdpOptions, build: () => T): T {
  contexts.push(options);
  try {
    const result = build();
    if (result instanceof Promise) {
      throw new FsdpConfigError(
        'enableWrap',
        'build must be synchronous: wrap units while constructing the model, then await outside',
      );
    }
    return result;
  } finally {
    contexts.pop();
  }
}

/**
 * Inside `enableWrap`, a unit around `module` with the context's options and `overrides`; outside
 * it, `module` unchanged (fairscale's `wrap`), so a model's code can mark its units once and be
 * built with or without FSDP.
 */
export function wrap<Args extends unknown[], Out>(
  module: Module<Args, Out>,
  overrides: Partial<FsdpOptions> = {},
): Module<Args, Out> | FullyShardedDataParallel<Args, Out> {
  const context = contexts[contexts.length - 1];
  if (context === undefined) return module;
  return new FullyShardedDataParallel(module, { ...context, ...overrides });
}
