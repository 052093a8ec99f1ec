import type { Module, Tensor } from '@webshard/tensor-core';
import { FsdpStateError, FsdpWrapError } from './errors.js';
import type { FlatParameter, FlatParamSource } from './flat-param.js';
import type { FsdpParamGroup, TrainingState } from './param-group.js';

/** The unit that holds a parameter in one of its flat parameters, as a borrower sees it. */
export interface ParamOwner {
  readonly paramGroup: FsdpParamGroup;
  readonly trainingState: TrainingState;
  readonly unitName: string;
}

interface Owned {
  readonly owner: ParamOwner;
  /** The parameter the owner's module computes with (a replacement under mixed precision). */
  readonly param: Tensor;
}

const owners = new WeakMap<Tensor, Owned>();

/**
 * [Note: parameters shared across units]
 * A parameter used by two sibling units (fairscale's test_fsdp_shared_weights: `l1.weight` is
 * `l3.weight`, l1 and l3 wrapped on their own) belongs to the unit wrapped first, the owner: it
 * sits in the owner's flat parameter, the owner's hooks count its gradient and reduce-scatter it,
 * and it is sharded once. Every unit wrapped later that finds it in its module is a borrower: its
 * module gets the owner's tensor (the same one under mixed precision, where the owner replaced it
 * by a 16-bit one), and around the borrower's forward and from its pre-backward the owner's flat
 * parameters are gathered too. The owner frees them after the borrower's forward when the borrower
 * gathered them (and reshards after forward); in backward they stay until the owner's own
 * reduce-scatter, which waits for the gradient of every use: the parameter's gradient is complete
 * only once the nodes of both units have run. Every rank wraps the same modules in the same order,
 * so the extra gathers come in the same order everywhere. A parameter shared by a unit and the
 * module around it (the root) is still a `FsdpWrapError`: the outer unit would hold the inner
 * one's parameters gathered for its whole forward.
 */
export function recordOwner(
  owner: ParamOwner,
  flats: readonly FlatParameter[],
  replacements: ReadonlyMap<Tensor, Tensor>,
): void {
  for (const [source, param] of replacements) {
    if (!owners.has(source)) owners.set(source, { owner, param });
  }
  for (const flat of flats) {
    for (const e of flat.entries) owners.set(e.param, { owner, param: e.param });
  }
}

/** The unit that holds `t`, and the tensor a borrower's module should compute with. */
export function ownerOf(t: Tensor): Owned | undefined {
  return owners.get(t);
}

/** The owners a borrower gathers around its forward and in its backward. */
export class BorrowedParams {
  constructor(private readonly owners: ParamOwner[]) {}

  /** Also gather `owner`'s parameters (`appendSharedParam`); no-op when already there. */
  add(owner: ParamOwner): void {
    if (!this.owners.includes(owner)) this.owners.push(owner);
  }

  /** Gather every owner's parameters; returns the owners that were sharded before. */
  async gather(): Promise<ParamOwner[]> {
    const gathered = this.owners.filter((o) => o.paramGroup.isSharded);
    for (const o of this.owners) o.paramGroup.unshard();
    for (const o of this.owners) await o.paramGroup.waitForUnshard();
    return gathered;
  }

  /** Free what `gather` gathered, unless the owner is itself computing. */
  reshard(gathered: readonly ParamOwner[]): void {
    for (const o of gathered) if (o.trainingState === 'IDLE') o.paramGroup.reshard();
  }
}

/**
 * Throw a `FsdpWrapError` when a parameter the unit found is also one of a nested unit's
 * (`nested`, wrapping a module of type `typeName`).
 */
export function checkNotUsedOutside(
  op: string,
  found: readonly FlatParamSource[],
  nested: ReadonlySet<Tensor>,
  typeName: string,
): void {
  for (const { tensor, names } of found) {
    if (nested.has(tensor)) {
      throw new FsdpWrapError(
        op,
        `parameter '${tensor.name ?? names[0]}' is used both inside the nested unit wrapping ${typeName} and outside it: wrap the smallest module that contains every use (autoWrap does), or leave it unwrapped`,
      );
    }
  }
}

/**
 * Split the parameters a new unit found in `module` into its own (`sources`) and those another
 * unit owns, which `module` gets the owner's tensors for; see [Note: parameters shared across
 * units].
 */
export function borrowShared(
  module: Module,
  found: readonly FlatParamSource[],
): { sources: FlatParamSource[]; borrowed: BorrowedParams } {
  const sources = found.filter(({ tensor }) => ownerOf(tensor) === undefined);
  const replacements = new Map<Tensor, Tensor>();
  const lenders = new Set<ParamOwner>();
  for (const { tensor } of found) {
    const owned = ownerOf(tensor);
    if (owned === undefined) continue;
    lenders.add(owned.owner);
    if (owned.param !== tensor) replacements.set(tensor, owned.param);
  }
  if (replacements.size > 0) module.replaceTensors(replacements);
  return { sources, borrowed: new BorrowedParams([...lenders]) };
}

/**
 * `appendSharedParam`: `borrower` also gathers the unit that holds `param`; a `FsdpWrapError` when
 * no unit, or the borrower itself, holds it, a `FsdpStateError` after the first forward.
 */
export function appendShared(
  borrower: ParamOwner & { readonly rank: number },
  borrowed: BorrowedParams,
  param: Tensor,
  initialized: boolean,
): void {
  if (initialized) {
    throw new FsdpStateError(
      'appendSharedParam',
      borrower.unitName,
      borrower.rank,
      'initialized',
      ['not initialized'],
      'call it before the first forward',
    );
  }
  const owned = ownerOf(param);
  if (owned === undefined || owned.owner === borrower) {
    const why =
      owned === undefined
        ? 'held by no unit: wrap the module that owns it first'
        : "this unit's own";
    throw new FsdpWrapError(
      'appendSharedParam',
      `unit '${borrower.unitName}' rank ${borrower.rank}: parameter '${param.name}' is ${why}`,
    );
  }
  borrowed.add(owned.owner);
}
