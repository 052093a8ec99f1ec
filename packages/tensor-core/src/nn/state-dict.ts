import { type DType, type HostArray, isFloatDType } from '../dtype.js';
import { WebshardError } from '../errors.js';
import type { Tensor } from '../tensor.js';

/** A key-to-tensor mapping for `loadStateDict`: a Map (as `stateDict` returns) or a plain object. */
export type StateDictInput = ReadonlyMap<string, Tensor> | Readonly<Record<string, Tensor>>;

/** One shape mismatch found by `loadStateDict`. */
export interface ShapeMismatch {
  key: string;
  checkpoint: readonly number[];
  model: readonly number[];
}

/** One dtype that cannot be loaded: an integer tensor into a float one, or the reverse. */
export interface DTypeMismatch {
  key: string;
  checkpoint: DType;
  model: DType;
}

/** A key whose tensor was freed: the checkpoint's, the model's, or both. */
export interface FreedKey {
  key: string;
  side: 'checkpoint' | 'model' | 'both';
}

/** The problems beyond keys and shapes that `StateDictError` lists. */
export interface StateDictProblems {
  dtypeMismatches?: readonly DTypeMismatch[];
  freedKeys?: readonly FreedKey[];
}

/**
 * A state dict that does not fit the module: every missing key, unexpected key, shape mismatch,
 * dtype mismatch and freed tensor in one message, like PyTorch's "Error(s) in loading state_dict".
 */
export class StateDictError extends WebshardError {
  readonly missingKeys: readonly string[];
  readonly unexpectedKeys: readonly string[];
  readonly shapeMismatches: readonly ShapeMismatch[];
  readonly dtypeMismatches: readonly DTypeMismatch[];
  readonly freedKeys: readonly FreedKey[];
  constructor(
    moduleName: string,
    missingKeys: readonly string[],
    unexpectedKeys: readonly string[],
    shapeMismatches: readonly ShapeMismatch[],
    problems: StateDictProblems = {},
  ) {
    const dtypeMismatches = problems.dtypeMismatches ?? [];
    const freedKeys = problems.freedKeys ?? [];
    const parts: string[] = [];
    if (missingKeys.length > 0) parts.push(`missing keys: ${missingKeys.join(', ')}`);
    if (unexpectedKeys.length > 0) parts.push(`unexpected keys: ${unexpectedKeys.join(', ')}`);
    for (const m of shapeMismatches) {
      parts.push(
        `shape mismatch for ${m.key}: checkpoint [${m.checkpoint.join(', ')}], model [${m.model.join(', ')}]`,
      );
    }
    for (const m of dtypeMismatches) {
      parts.push(`dtype mismatch for ${m.key}: checkpoint ${m.checkpoint}, model ${m.model}`);
    }
    for (const f of freedKeys) {
      const whose = f.side === 'both' ? 'the checkpoint and the model' : `the ${f.side}`;
      parts.push(`${f.key} was freed in ${whose}`);
    }
    super(`[loadStateDict] error(s) loading the state dict of ${moduleName}: ${parts.join('; ')}`, {
      code: 'E_STATE_DICT',
    });
    this.missingKeys = missingKeys;
    this.unexpectedKeys = unexpectedKeys;
    this.shapeMismatches = shapeMismatches;
    this.dtypeMismatches = dtypeMismatches;
    this.freedKeys = freedKeys;
  }
}

/**
 * [Note: loadStateDict is all or nothing]
 *
 * `loadStateDict` never half-loads. Phase 1 checks every pair (checkpoint tensor, model tensor)
 * for shape, dtype kind (integer and float do not mix; f32 into bf16 converts, as in PyTorch) and
 * liveness of both, and throws one `StateDictError` listing every problem. Phase 2 does every
 * await: tensors on another backend are read to the host, all of them, before anything is written.
 * Phase 3 checks liveness again (a tensor could have been freed while phase 2 awaited) and then
 * writes every parameter synchronously, so no other code runs between the first write and the
 * last. The cost is that a checkpoint on another backend is staged on the host whole, as PyTorch's
 * `torch.load` does; one on the model's backend is cast in place, staged nowhere.
 */

function freedKey(key: string, source: Tensor, target: Tensor): FreedKey | null {
  if (source.isFreed && target.isFreed) return { key, side: 'both' };
  if (source.isFreed) return { key, side: 'checkpoint' };
  if (target.isFreed) return { key, side: 'model' };
  return null;
}

/** What to write into a target: a same-backend source (cast on the device) or host values. */
type Staged =
  | { target: Tensor; source: Tensor; key: string }
  | { target: Tensor; raw: HostArray }
  | { target: Tensor; values: Float32Array | Int32Array | Float64Array };

/**
 * Load `given` into the module's own tensors `own` (from `stateDict()`), all or nothing (see
 * [Note: loadStateDict is all or nothing]). Throws `StateDictError` naming every problem.
 */
export async function loadStateDictInto(
  moduleName: string,
  own: ReadonlyMap<string, Tensor>,
  dict: StateDictInput,
  strict: boolean,
): Promise<{ missingKeys: string[]; unexpectedKeys: string[] }> {
  const given: Map<string, Tensor> =
    dict instanceof Map
      ? new Map(dict)
      : new Map(Object.entries(dict as Readonly<Record<string, Tensor>>));
  const missingKeys = [...own.keys()].filter((k) => !given.has(k));
  const unexpectedKeys = [...given.keys()].filter((k) => !own.has(k));
  const shapeMismatches: ShapeMismatch[] = [];
  const dtypeMismatches: DTypeMismatch[] = [];
  const freedKeys: FreedKey[] = [];
  const pairs: [string, Tensor, Tensor][] = [];
  for (const [key, target] of own) {
    const source = given.get(key);
    if (source === undefined) continue;
    pairs.push([key, source, target]);
    if (source.rank !== target.rank || source.shape.some((d, i) => d !== target.shape[i])) {
      shapeMismatches.push({ key, checkpoint: source.shape, model: target.shape });
    }
    if (isFloatDType(source.dtype) !== isFloatDType(target.dtype)) {
      dtypeMismatches.push({ key, checkpoint: source.dtype, model: target.dtype });
    }
    const freed = freedKey(key, source, target);
    if (freed !== null) freedKeys.push(freed);
  }
  const fail = (freed: FreedKey[]) =>
    new StateDictError(
      moduleName,
      strict ? missingKeys : [],
      strict ? unexpectedKeys : [],
      shapeMismatches,
      { dtypeMismatches, freedKeys: freed },
    );
  if (
    shapeMismatches.length > 0 ||
    dtypeMismatches.length > 0 ||
    freedKeys.length > 0 ||
    (strict && (missingKeys.length > 0 || unexpectedKeys.length > 0))
  ) {
    throw fail(freedKeys);
  }

  const staged: Staged[] = [];
  for (const [key, source, target] of pairs) {
    if (source === target) continue;
    if (source.backend === target.backend) staged.push({ target, source, key });
    else if (source.dtype === target.dtype) staged.push({ target, raw: await source.readRaw() });
    else staged.push({ target, values: await source.read() });
  }

  const late = pairs.map(([key, s, t]) => freedKey(key, s, t)).filter((f) => f !== null);
  if (late.length > 0) throw fail(late);
  const op = 'loadStateDict';
  for (const item of staged) {
    const { target } = item;
    if ('source' in item) target.backend.cast(item.source.kernel(op), target.kernel(op));
    else if ('raw' in item) target.backend.write(target.kernel(op), item.raw);
    else target.write(item.values);
  }
  return { missingKeys, unexpectedKeys };
}
