import { keep, type Module, Tensor } from '@webshard/tensor-core';
import { FsdpConfigError } from './errors.js';
import type { ResolvedOptions } from './api.js';
import type { FlatParameter } from './flat-param.js';
import type { FsdpParamGroup, TrainingState } from './param-group.js';
import type { SsdShards } from './ssd/ssd-shards.js';

/** Options of `summonFullParams`. */
export interface SummonOptions {
  /** Also the units nested inside this one. Default true. */
  recurse?: boolean;
  /** Discard changes made inside instead of writing them back into the shards. Default false. */
  volatile?: boolean;
  /**
   * Only rank 0 holds the full parameters inside (the others take part in the gathers and free
   * them at once); needs `volatile`, since the other ranks have nothing to write back.
   */
  rank0Only?: boolean;
}

/**
 * What summoning needs of a unit; `FullyShardedDataParallel` is one. Named here, not imported, so
 * the wrapper that calls these functions and this file do not name each other (#36).
 */
export interface SummonUnit {
  readonly module: Module;
  readonly options: ResolvedOptions;
  readonly paramGroup: FsdpParamGroup;
  readonly ssdShards: SsdShards | null;
  trainingState: TrainingState;
  readonly unitName: string;
  readonly rank: number;
  /** This unit and the units nested inside it. */
  units(): readonly SummonUnit[];
  assertState(op: string, states: readonly TrainingState[]): void;
}

interface Summoned {
  readonly unit: SummonUnit;
  readonly flat: FlatParameter;
  /** The gathered f32 buffer on the shard's backend. */
  readonly full: Tensor;
  /** The tensors put into the module for the summon, by the parameter they stand in for. */
  readonly standIns: Map<Tensor, Tensor>;
}

/**
 * [Note: summoning full parameters]
 * Outside forward and backward the parameters are sharded. `summonFullParams` gathers every flat
 * parameter's FP32 shards into a full f32 buffer on the shard's backend and, for the duration of
 * `fn`, puts into the module tensors that are views of it: the unit's own parameters when they are
 * f32 on that backend (their identity kept), otherwise stand-ins registered under the same names
 * (under mixed precision the module's parameters are 16-bit and cannot hold f32 data), swapped back
 * on exit. On exit (also when `fn` throws) each rank copies its slice of the full buffer back into
 * its shard unless `volatile`, then frees everything: the units are sharded and IDLE again.
 */
export async function summonFullParams<T>(
  root: SummonUnit,
  fn: () => T | Promise<T>,
  options: SummonOptions = {},
): Promise<T> {
  const recurse = options.recurse ?? true;
  const volatile = options.volatile ?? false;
  const rank0Only = options.rank0Only ?? false;
  if (rank0Only && !volatile) {
    throw new FsdpConfigError(
      'summonFullParams',
      'rank0Only needs volatile: true (ranks other than 0 have no full parameters to write back)',
    );
  }
  const units = recurse ? root.units() : [root];
  for (const unit of units) unit.assertState('summonFullParams', ['IDLE']);
  const group = root.options.group;
  const holds = !rank0Only || group.rank === 0;
  const summoned: Summoned[] = [];
  for (const unit of units) {
    await unit.paramGroup.waitForUnshard();
    unit.paramGroup.reshard();
    unit.trainingState = 'SUMMON_FULL_PARAMS';
  }
  try {
    for (const unit of units) if (unit.ssdShards !== null) await unit.ssdShards.load();
    for (const unit of units) {
      for (const flat of unit.paramGroup.flatParams) {
        const backend = flat.shard.backend;
        const full = keep(Tensor.empty(backend, [flat.paddedNumel], 'f32'));
        await group.allGather(flat.shard, full).wait();
        if (!holds) {
          full.free();
          continue;
        }
        const standIns = new Map<Tensor, Tensor>();
        for (const e of flat.entries) {
          const view = keep(full.view(e.shape, e.offset));
          if (e.param.dtype === 'f32' && e.param.backend === backend) {
            e.param.setData(view);
            view.free();
          } else {
            view.name = e.param.name;
            view.requiresGrad = e.param.requiresGrad;
            standIns.set(e.param, view);
          }
        }
        if (standIns.size > 0) unit.module.replaceTensors(standIns);
        summoned.push({ unit, flat, full, standIns });
      }
    }
    return await fn();
  } finally {
    for (const { unit, flat, full, standIns } of summoned) {
      if (!volatile) {
        const backend = flat.shard.backend;
        backend.copy(
          {
            ...full.kernel('summonFullParams'),
            offset: full.offset + group.rank * flat.shardNumel,
            shape: [flat.shardNumel],
          },
          flat.shard.kernel('summonFullParams'),
        );
      }
      if (standIns.size > 0) {
        const back = new Map<Tensor, Tensor>();
        for (const [param, standIn] of standIns) back.set(standIn, param);
        unit.module.replaceTensors(back);
        for (const standIn of standIns.values()) standIn.free();
      }
      for (const e of flat.entries) e.param.free();
      full.free();
    }
    for (const unit of units) {
      if (unit.ssdShards !== null) {
        if (!volatile) unit.ssdShards.markDirty();
        await unit.ssdShards.release();
      }
      unit.trainingState = 'IDLE';
    }
  }
}

/**
 * `fn` on every module of `unit`'s wrapped model, nested units too, in `Module.apply`'s order
 * (children before their parent, in registration order), inside `summonFullParams`.
 */
export async function applyWithFullParams(
  unit: SummonUnit,
  fn: (module: Module) => void | Promise<void>,
): Promise<void> {
  const visit = async (m: Module): Promise<void> => {
    for (const child of m.children()) await visit(child);
    await fn(m);
  };
  await summonFullParams(unit, () => visit(unit.module));
}

/**
 * The wrapped module's `resetParameters()` inside `summonFullParams` (written back into the
 * shards); a `FsdpConfigError` without `allowResetParameters` or when there is no such method.
 */
export async function resetWithFullParams(unit: SummonUnit): Promise<void> {
  const op = 'resetParameters';
  const where = `unit '${unit.unitName}' rank ${unit.rank}`;
  if (!unit.options.allowResetParameters) {
    throw new FsdpConfigError(
      op,
      `${where}: resetting parameters after wrapping is not allowed: pass allowResetParameters: true`,
    );
  }
  const module = unit.module as Module & { resetParameters?: () => void | Promise<void> };
  const reset = module.resetParameters;
  if (typeof reset !== 'function') {
    throw new FsdpConfigError(op, `${where}: ${module.typeName} has no resetParameters()`);
  }
  await summonFullParams(unit, () => reset.call(module));
}
