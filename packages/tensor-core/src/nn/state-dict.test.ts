import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clone, tensor, toDType } from '../ops/index.js';
import { createCpuBackend, setDefaultBackend } from '../runtime.js';
import { Tensor } from '../tensor.js';
import { Sequential } from './containers.js';
import { Linear, ReLU } from './layers.js';
import { StateDictError } from './state-dict.js';

const backend = createCpuBackend();
beforeAll(() => setDefaultBackend(backend));
afterAll(() => setDefaultBackend(undefined));

function model(): Sequential {
  return new Sequential(new Linear(3, 2), new ReLU(), new Linear(2, 1));
}

/** A copy of every tensor of a model's state dict (so the test may free them). */
function copies(m: Sequential): Map<string, Tensor> {
  return new Map([...m.stateDict()].map(([k, t]) => [k, clone(t)]));
}

async function snapshot(m: Sequential): Promise<Record<string, number[]>> {
  const out: Record<string, number[]> = {};
  for (const [k, t] of m.stateDict()) if (!t.isFreed) out[k] = [...(await t.read())];
  return out;
}

async function refused(m: Sequential, dict: Map<string, Tensor>): Promise<StateDictError> {
  const error = await m.loadStateDict(dict).catch((e: unknown) => e);
  expect(StateDictError.isInstance(error), String(error)).toBe(true);
  return error as StateDictError;
}

describe('loadStateDict validates everything before it writes anything', () => {
  it('a freed tensor late in the dict: nothing overwritten, the key named', async () => {
    const target = model();
    const before = await snapshot(target);
    const dict = copies(model());
    dict.get('2.bias')!.free();
    const error = await refused(target, dict);
    expect(error.message).toBe(
      '[loadStateDict] error(s) loading the state dict of Sequential: 2.bias was freed in the checkpoint',
    );
    expect(error.freedKeys).toEqual([{ key: '2.bias', side: 'checkpoint' }]);
    expect(await snapshot(target)).toEqual(before);
  });

  it('a freed model parameter, and a problem of every kind, all in one error', async () => {
    const target = model();
    const dict = copies(model());
    dict.set('0.bias', tensor([1, 2, 3]));
    dict.set('2.weight', Tensor.empty(backend, [1, 2], 'i32'));
    target.at(2).getParameter('bias').free();
    const before = await snapshot(target);
    const error = await refused(target, dict);
    expect(error.message).toBe(
      '[loadStateDict] error(s) loading the state dict of Sequential: shape mismatch for 0.bias: checkpoint [3], model [2]; dtype mismatch for 2.weight: checkpoint i32, model f32; 2.bias was freed in the model',
    );
    expect(error.dtypeMismatches).toEqual([{ key: '2.weight', checkpoint: 'i32', model: 'f32' }]);
    expect(await snapshot(target)).toEqual(before);
  });

  it('a dict on another backend loads whole, or (freed there) not at all', async () => {
    const other = createCpuBackend();
    const source = model();
    const want = await snapshot(source);
    const onOther = new Map<string, Tensor>();
    for (const [k, t] of source.stateDict()) onOther.set(k, await t.to(other));
    const target = model();
    await target.loadStateDict(onOther);
    expect(await snapshot(target)).toEqual(want);

    const fresh = model();
    const before = await snapshot(fresh);
    onOther.get('2.weight')!.free();
    const error = await refused(fresh, onOther);
    expect(error.freedKeys).toEqual([{ key: '2.weight', side: 'checkpoint' }]);
    expect(await snapshot(fresh)).toEqual(before);
  });

  it('converts between float dtypes, as PyTorch does', async () => {
    const target = model();
    const dict = copies(model());
    dict.set('0.bias', toDType(dict.get('0.bias')!, 'bf16'));
    await target.loadStateDict(dict);
    expect(await target.at(0).getParameter('bias').read()).toEqual(
      await dict.get('0.bias')!.read(),
    );
  });
});
