import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ArgumentError, FreedTensorError } from '../errors.js';
import { mul, square, sum, tensor } from '../ops/index.js';
import { RandomGenerator } from '../random/generator.js';
import { createCpuBackend, setDefaultBackend } from '../runtime.js';
import { Tensor } from '../tensor.js';
import { CausalSelfAttention } from './attention.js';
import { ModuleDict, ModuleList, Sequential } from './containers.js';
import { Dropout, Embedding, GELU, LayerNorm, Linear, ReLU } from './layers.js';
import { Module, StateDictError } from './module.js';

const backend = createCpuBackend();
beforeAll(() => setDefaultBackend(backend));
afterAll(() => setDefaultBackend(undefined));

/** A nanoGPT-shaped toy: transformer.{wte, h.N.{ln_1, attn}, ln_f} and a tied lm_head. */
class Block extends Module<[Tensor], Tensor> {
  readonly ln1 = this.registerModule('ln_1', new LayerNorm(4));
  readonly attn = this.registerModule('attn', new CausalSelfAttention({ nEmbd: 4, nHead: 2 }));
  forward(x: Tensor): Tensor {
    return this.attn.call(this.ln1.call(x));
  }
}

class Toy extends Module<[Tensor], Tensor> {
  readonly transformer = this.registerModule(
    'transformer',
    new ModuleDict<Module>({
      wte: new Embedding(10, 4),
      h: new ModuleList([new Block(), new Block()]),
      ln_f: new LayerNorm(4),
    }),
  );
  readonly lmHead = this.registerModule('lm_head', new Linear(4, 10, { bias: false }));
  constructor() {
    super();
    this.lmHead.weight = (this.transformer.get('wte') as Embedding).weight;
  }
  forward(ids: Tensor): Tensor {
    return ids;
  }
}

function det(shape: number[], k: number): Tensor {
  const n = shape.reduce((p, d) => p * d, 1);
  const values = Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + k) * 0.5);
  return tensor(values, { dtype: 'f64', shape });
}

async function values(t: Tensor): Promise<number[]> {
  return [...(await t.read())];
}

describe('Module', () => {
  it('names parameters like PyTorch and counts a tied weight once', () => {
    const model = new Toy();
    const names = model.namedParameters().map(([n]) => n);
    expect(names).toEqual([
      'transformer.wte.weight',
      'transformer.h.0.ln_1.weight',
      'transformer.h.0.ln_1.bias',
      'transformer.h.0.attn.c_attn.weight',
      'transformer.h.0.attn.c_attn.bias',
      'transformer.h.0.attn.c_proj.weight',
      'transformer.h.0.attn.c_proj.bias',
      'transformer.h.1.ln_1.weight',
      'transformer.h.1.ln_1.bias',
      'transformer.h.1.attn.c_attn.weight',
      'transformer.h.1.attn.c_attn.bias',
      'transformer.h.1.attn.c_proj.weight',
      'transformer.h.1.attn.c_proj.bias',
      'transformer.ln_f.weight',
      'transformer.ln_f.bias',
    ]);
    const keys = [...model.stateDict().keys()];
    expect(keys).toHaveLength(16);
    expect(keys.at(-1)).toBe('lm_head.weight');
    expect(model.stateDict().get('lm_head.weight')).toBe(
      model.stateDict().get('transformer.wte.weight'),
    );
    expect(model.namedModules().map(([n]) => n)).toContain('transformer.h.1.attn.resid_dropout');
    model.nameTensors();
    expect(model.lmHead.weight.name).toBe('transformer.wte.weight');
    expect(model.parameters().every((p) => p.requiresGrad)).toBe(true);
  });

  it('loads a state dict, and reports every problem at once when strict', async () => {
    const a = new Sequential(new Linear(3, 2), new ReLU(), new Linear(2, 1));
    const b = new Sequential(new Linear(3, 2), new ReLU(), new Linear(2, 1));
    await b.loadStateDict(a.stateDict());
    expect(await values(b.at(0).getParameter('weight'))).toEqual(
      await values(a.at(0).getParameter('weight')),
    );
    const dict = new Map(a.stateDict());
    dict.delete('2.bias');
    dict.set('extra.weight', tensor([1]));
    dict.set('0.bias', tensor([1, 2, 3]));
    const error = await b.loadStateDict(dict).catch((e: unknown) => e);
    expect(StateDictError.isInstance(error)).toBe(true);
    expect((error as StateDictError).message).toBe(
      '[loadStateDict] error(s) loading the state dict of Sequential: missing keys: 2.bias; unexpected keys: extra.weight; shape mismatch for 0.bias: checkpoint [3], model [2]',
    );
    dict.set('0.bias', tensor([5, 6]));
    const result = await b.loadStateDict(dict, { strict: false });
    expect(result).toEqual({ missingKeys: ['2.bias'], unexpectedKeys: ['extra.weight'] });
    expect(await values(b.at(0).getParameter('bias'))).toEqual([5, 6]);
  });

  it('switches train / eval everywhere and applies a function post-order', () => {
    const model = new Toy();
    model.eval();
    expect(model.modules().every((m) => !m.training)).toBe(true);
    model.train();
    expect(model.modules().every((m) => m.training)).toBe(true);
    const order: string[] = [];
    new Sequential(new ReLU(), new GELU()).apply((m) => order.push(m.typeName));
    expect(order).toEqual(['ReLU', 'GELU', 'Sequential']);
  });

  it('runs forward pre-hooks and hooks in order, with replacement, async ones included', async () => {
    const lin = new Linear(2, 1);
    const events: string[] = [];
    const h1 = lin.registerForwardPreHook((_m, args) => {
      events.push('pre1');
      return [mul(args[0] as Tensor, 2)];
    });
    lin.registerForwardHook((_m, _args, out) => {
      events.push('post');
      return mul(out as Tensor, 0);
    });
    const x = tensor([[1, 1]]);
    const out = lin.call(x);
    expect(out).toBeInstanceOf(Tensor);
    expect(await values(out as Tensor)).toEqual([0]);
    h1.remove();
    lin.registerForwardPreHook(async () => {
      await new Promise((r) => setTimeout(r, 1));
      events.push('asyncPre');
      return undefined;
    });
    const pending = lin.call(x) as unknown;
    expect(pending).toBeInstanceOf(Promise);
    await pending;
    expect(events).toEqual(['pre1', 'post', 'asyncPre', 'post']);
    expect(await lin.callAsync(x)).toBeInstanceOf(Tensor);
  });

  it('moves to another backend keeping ties, names and requiresGrad', async () => {
    const other = createCpuBackend();
    const model = new Toy();
    model.nameTensors();
    const before = await values(model.lmHead.weight);
    await model.to(other);
    expect(model.lmHead.weight.backend).toBe(other);
    expect(model.lmHead.weight).toBe((model.transformer.get('wte') as Embedding).weight);
    expect(model.lmHead.weight.name).toBe('transformer.wte.weight');
    expect(model.parameters().every((p) => p.backend === other && p.requiresGrad)).toBe(true);
    expect(await values(model.lmHead.weight)).toEqual(before);
  });

  it('rejects bad registrations', () => {
    const m = new ReLU();
    expect(() => m.registerParameter('a.b', null)).toThrow(
      new ArgumentError('registerParameter', "name 'a.b' must be non-empty and without '.'"),
    );
    m.registerBuffer('buf', tensor([1]));
    expect(() => m.registerParameter('buf', tensor([1]))).toThrow(
      "[registerParameter] 'buf' is already a buffer or module",
    );
  });

  it('names its tensors by their full path as it is built, so a freed one is named so', async () => {
    const model = new Toy();
    // No nameTensors(): registering each child prefixed the names built below it.
    for (const [name, t] of model.namedParameters()) expect(t.name).toBe(name);
    const block = (model.transformer.get('h') as ModuleList<Block>).at(0);
    const weight = block.attn.cAttn.weight;
    expect(weight.name).toBe('transformer.h.0.attn.c_attn.weight');
    // The tied lm_head keeps the name it got first, as PyTorch's named_parameters() does.
    expect(model.lmHead.weight.name).toBe('transformer.wte.weight');
    // A name given by hand is left alone.
    const lin = new Linear(2, 2);
    lin.weight.name = 'mine';
    new Sequential(lin);
    expect(lin.weight.name).toBe('mine');
    expect(lin.bias!.name).toBe('0.bias');

    // FSDP frees the parameter after forward and fails to rebuild it before its gradient.
    const y = block.call(
      tensor(
        Array.from({ length: 12 }, (_, i) => Math.sin(i)),
        { shape: [1, 3, 4] },
      ),
    );
    weight.free();
    const error = await sum(square(y))
      .backward()
      .catch((e: unknown) => e);
    expect(FreedTensorError.isInstance(error)).toBe(true);
    expect((error as FreedTensorError).tensorName).toBe('transformer.h.0.attn.c_attn.weight');
    expect((error as Error).message).toMatch(
      /^\[\w+ backward\] tensor 'transformer\.h\.0\.attn\.c_attn\.weight' was used after its storage was freed$/,
    );
  });
});

describe('layers', () => {
  it('initializes as PyTorch: Linear U(+-1/sqrt(in)), Embedding N(0,1), LayerNorm ones/zeros', async () => {
    const lin = new Linear(16, 32, { generator: new RandomGenerator(1) });
    const w = await values(lin.weight);
    const bound = 1 / Math.sqrt(16);
    expect(Math.max(...w.map(Math.abs))).toBeLessThanOrEqual(bound);
    expect(Math.max(...w.map(Math.abs))).toBeGreaterThan(bound * 0.9);
    const again = new Linear(16, 32, { generator: new RandomGenerator(1) });
    expect(await values(again.weight)).toEqual(w);
    const emb = await values(new Embedding(100, 20, { generator: new RandomGenerator(2) }).weight);
    const m = emb.reduce((p, v) => p + v, 0) / emb.length;
    const sd = Math.sqrt(emb.reduce((p, v) => p + (v - m) ** 2, 0) / emb.length);
    expect(Math.abs(m)).toBeLessThan(0.1);
    expect(Math.abs(sd - 1)).toBeLessThan(0.1);
    const ln = new LayerNorm(3);
    expect(await values(ln.weight!)).toEqual([1, 1, 1]);
    expect(await values(ln.bias!)).toEqual([0, 0, 0]);
  });

  it('skipInit: zeros, the generator advanced as if the layer had drawn, so later draws are unchanged', async () => {
    const drawn = new RandomGenerator(5);
    const skipped = new RandomGenerator(5);
    new Linear(3, 4, { generator: drawn });
    new Embedding(6, 2, { generator: drawn });
    const lin = new Linear(3, 4, { generator: skipped, skipInit: true });
    const emb = new Embedding(6, 2, { generator: skipped, skipInit: true });
    expect(await values(lin.weight)).toEqual(new Array(12).fill(0));
    expect(await values(lin.bias!)).toEqual([0, 0, 0, 0]);
    expect(await values(emb.weight)).toEqual(new Array(12).fill(0));
    expect(skipped.offset).toBe(drawn.offset);
    expect(skipped.offset).toBe(12 + 4 + 12);
    const next = (generator: RandomGenerator) => values(new Linear(2, 2, { generator }).weight);
    expect(await next(skipped)).toEqual(await next(drawn));
  });

  it("Linear's weight and bias are U(-1/sqrt(in), 1/sqrt(in)) as PyTorch's, statistically", async () => {
    /**
     * Checks of a sample against U(-b, b): every value in [-b, b), the extremes near +-b, mean
     * and variance (b^2 / 3) within 5 standard errors, and 8 equal-width bins each within 5
     * standard deviations of n / 8. A wrong bound (1/sqrt(out), kaiming's sqrt(6 / in)) or a
     * normal instead of a uniform fails at least one of them.
     */
    const expectUniform = (v: number[], b: number): void => {
      const n = v.length;
      const lo = v.reduce((p, x) => Math.min(p, x), Number.POSITIVE_INFINITY);
      const hi = v.reduce((p, x) => Math.max(p, x), Number.NEGATIVE_INFINITY);
      expect(lo).toBeGreaterThanOrEqual(-b);
      expect(hi).toBeLessThan(b);
      // P(no value beyond 0.97 b on one side) = 0.985^n: below 1e-3 from n = 460.
      expect(hi).toBeGreaterThan(0.97 * b);
      expect(lo).toBeLessThan(-0.97 * b);
      const mean = v.reduce((p, x) => p + x, 0) / n;
      const variance = v.reduce((p, x) => p + (x - mean) ** 2, 0) / n;
      expect(Math.abs(mean)).toBeLessThan((5 * b) / Math.sqrt(3 * n));
      // The variance of (x - mean)^2 for U(-b, b) is 4 b^4 / 45.
      expect(Math.abs(variance - (b * b) / 3)).toBeLessThan((5 * 2 * b * b) / Math.sqrt(45 * n));
      const bins = new Array<number>(8).fill(0);
      for (const x of v) bins[Math.min(7, Math.floor(((x + b) / (2 * b)) * 8))]!++;
      const sd = Math.sqrt(n * (1 / 8) * (7 / 8));
      for (const count of bins) expect(Math.abs(count - n / 8)).toBeLessThan(5 * sd);
    };
    const lin = new Linear(64, 1024, { generator: new RandomGenerator(5) });
    const bound = 1 / Math.sqrt(64); // from in_features: 1/sqrt(out) would be 1/32
    expectUniform(await values(lin.weight), bound);
    expectUniform(await values(lin.bias!), bound);
    // Weight and bias are different draws.
    expect((await values(lin.bias!)).slice(0, 8)).not.toEqual(
      (await values(lin.weight)).slice(0, 8),
    );
  });

  it('Dropout: seeded mask, 1/(1-p) scaling, identity in eval', async () => {
    const drop = new Dropout(0.5, { generator: new RandomGenerator(7) });
    const x = tensor(Array.from({ length: 64 }, () => 1));
    const y = await values(drop.call(x));
    expect(new Set(y)).toEqual(new Set([0, 2]));
    drop.generator!.setOffset(0);
    expect(await values(drop.call(x))).toEqual(y);
    drop.eval();
    expect(await values(drop.call(x))).toEqual(Array.from({ length: 64 }, () => 1));
    expect(() => new Dropout(1.5)).toThrow('[Dropout] probability 1.5 is not in [0, 1]');
  });

  it('Dropout as the identity (p = 0, eval) is a view of its input: no kernel either way', async () => {
    const x = tensor(
      Array.from({ length: 24 }, (_, i) => i / 7 - 1),
      { shape: [2, 3, 4] },
    );
    x.requiresGrad = true;
    const w = tensor(
      Array.from({ length: 24 }, (_, i) => (i % 5) - 2.5),
      { shape: [2, 3, 4] },
    );
    for (const drop of [new Dropout(0), new Dropout(0.5).eval()]) {
      const kernels: string[] = [];
      const binary = backend.binary.bind(backend);
      backend.binary = (...args) => {
        kernels.push(args[0]);
        return binary(...args);
      };
      let y: Tensor;
      try {
        y = drop.call(x);
        expect(kernels).toEqual([]);
        expect(y).not.toBe(x);
        expect(y.shape).toEqual([2, 3, 4]);
        expect(await values(y)).toEqual(await values(x));
        const loss = sum(mul(y, w));
        kernels.length = 0;
        await loss.backward();
        // The loss's own backward multiplies by w; nothing else runs for the dropout.
        expect(kernels).toEqual(['mul']);
      } finally {
        delete (backend as { binary?: unknown }).binary;
      }
      expect(await values(x.grad!)).toEqual(await values(w));
      x.grad!.free();
      x.grad = null;
      y.free();
      expect(await values(x)).toEqual(Array.from({ length: 24 }, (_, i) => Math.fround(i / 7 - 1)));
    }
  });

  it('CausalSelfAttention matches PyTorch (nanoGPT) forward and gradients in f64', async () => {
    // /usr/bin/python3: nanoGPT's attention with C=4, nh=2, B=1, T=3, weights
    // det(shape, k) = [sin(i*0.37 + k) * 0.5 for i in range(n)]: Wa det([12,4],1), ba det([12],2),
    // Wp det([4,4],3), bp det([4],4), x det([1,3,4],5); loss (y*y).sum().
    const attn = new CausalSelfAttention({ nEmbd: 4, nHead: 2, dtype: 'f64' });
    await attn.loadStateDict({
      'c_attn.weight': det([12, 4], 1),
      'c_attn.bias': det([12], 2),
      'c_proj.weight': det([4, 4], 3),
      'c_proj.bias': det([4], 4),
    });
    const y = attn.call(det([1, 3, 4], 5));
    const expected = [
      -0.504221046258, 0.249238029107, -0.243383371865, -1.134708876155, -0.19216096525,
      0.013085526852, -0.598268114874, -0.962912326193, -0.082835763648, -0.020131606232,
      -0.71361701931, -0.9506129382,
    ];
    for (const [i, v] of (await values(y)).entries()) expect(v).toBeCloseTo(expected[i]!, 10);
    await sum(square(y)).backward();
    const dbp = [-1.558435550314, 0.484383899455, -3.110537012096, -6.096468281095];
    for (const [i, v] of (await values(attn.cProj.bias!.grad!)).entries()) {
      expect(v).toBeCloseTo(dbp[i]!, 10);
    }
    const dWa = await values(attn.cAttn.weight.grad!);
    expect(dWa[0]).toBeCloseTo(-0.087115777177, 10);
    expect(dWa[32]).toBeCloseTo(0.542130994527, 10);
    expect(dWa[47]).toBeCloseTo(-0.434396789837, 10);
  });
});
