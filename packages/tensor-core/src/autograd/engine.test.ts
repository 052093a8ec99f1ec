import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FreedTensorError } from '../errors.js';
import { Dropout, Linear } from '../nn/layers.js';
import { add, exp, gelu, matmul, mul, sum, tanh, tensor } from '../ops/index.js';
import { RandomGenerator, getDefaultGenerator, manualSeed } from '../random/generator.js';
import { createCpuBackend, setDefaultBackend } from '../runtime.js';
import { tidy } from '../scope.js';
import { Tensor } from '../tensor.js';
import { expectClose } from '../testing/index.js';
import { checkpoint, checkpointWith } from './checkpoint.js';
import { queueCallback } from './running-backward.js';
import { AutogradError } from './errors.js';
import { enableGrad, isGradEnabled, noGrad } from './grad-mode.js';

const backend = createCpuBackend();
beforeAll(() => setDefaultBackend(backend));
afterAll(() => setDefaultBackend(undefined));

function leaf(values: number[], shape = [values.length]): Tensor {
  const t = tensor(values, { shape });
  t.requiresGrad = true;
  return t;
}

async function values(t: Tensor | null): Promise<number[]> {
  if (t === null) throw new Error('expected a tensor');
  return [...(await t.read())];
}

const tick = () => new Promise<void>((r) => setTimeout(r, 1));

describe('backward', () => {
  it('accumulates into .grad across backwards, and respects requiresGrad', async () => {
    const a = leaf([1, 2]);
    const frozen = tensor([3, 4]);
    const y = () => sum(mul(a, frozen));
    await y().backward();
    expect(await values(a.grad)).toEqual([3, 4]);
    expect(frozen.grad).toBeNull();
    await y().backward();
    expect(await values(a.grad)).toEqual([6, 8]);
  });

  it('adds a later gradient into .grad in place: the same tensor, nothing copied', async () => {
    const a = leaf([1, 2]);
    const y = () => sum(mul(a, tensor([3, 4])));
    await y().backward();
    const grad = a.grad;
    const copy = vi.spyOn(backend, 'copy');
    try {
      await y().backward();
      expect(copy).not.toHaveBeenCalled();
    } finally {
      copy.mockRestore();
    }
    expect(a.grad).toBe(grad);
    expect(await values(a.grad)).toEqual([6, 8]);
  });

  it('sums the gradients of a tensor used several times into the first one, in place', async () => {
    const x = leaf([1, 2, 3]);
    const h = mul(x, 2);
    const loss = add(add(sum(mul(h, tensor([1, 2, 3]))), sum(mul(h, 4))), sum(mul(h, h)));
    const binary = vi.spyOn(backend, 'binary');
    try {
      await loss.backward();
      // h's gradients meet in its slot: each later one is added into the sum so far (out = a).
      const adds = binary.mock.calls.filter(([op, a, , out]) => op === 'add' && a === out);
      expect(adds.length).toBeGreaterThanOrEqual(2);
    } finally {
      binary.mockRestore();
    }
    // d/dx = 2 (c + 4 + 2h) with h = 2x.
    expect(await values(x.grad)).toEqual([1, 2, 3].map((v, i) => 2 * ([1, 2, 3][i]! + 4 + 4 * v)));
  });

  it('needs a gradient for a non-scalar root, and takes one', async () => {
    const a = leaf([1, 2]);
    const y = mul(a, 3);
    await expect(y.backward()).rejects.toThrow(
      '[backward] a gradient is needed for root 0 of shape [2]: only one-element roots get ones',
    );
    await y.backward(tensor([1, 10]));
    expect(await values(a.grad)).toEqual([3, 30]);
    await expect(tensor([1]).backward()).rejects.toThrow(AutogradError);
  });

  it('releases the graph unless retainGraph, and says so on a second backward', async () => {
    const a = leaf([0.5]);
    const y = exp(a);
    await y.backward(null, { retainGraph: true });
    await y.backward();
    expect((await values(a.grad))[0]).toBeCloseTo(2 * Math.exp(0.5), 6);
    await expect(y.backward()).rejects.toThrow(
      /\[exp backward\] the graph was already released: backward through it a second time needs retainGraph: true/,
    );
  });

  it('records nothing under noGrad, and again under enableGrad', () => {
    const a = leaf([1]);
    noGrad(() => {
      expect(isGradEnabled()).toBe(false);
      expect(mul(a, 2).requiresGrad).toBe(false);
      enableGrad(() => expect(mul(a, 2).requiresGrad).toBe(true));
    });
    expect(isGradEnabled()).toBe(true);
  });
});

describe('hooks', () => {
  it('fires tensor hooks in order before the producer runs, and lets them replace gradients', async () => {
    const a = leaf([1, 2]);
    const events: string[] = [];
    const h = mul(a, 3);
    h.registerHook((g) => {
      events.push('h1');
      return mul(g, 10);
    });
    h.registerHook(async (g) => {
      await tick();
      events.push(`h2:${(await g.read()).join(',')}`);
      return undefined;
    });
    const removed = a.registerHook(() => {
      events.push('removed');
      return undefined;
    });
    removed.remove();
    a.registerHook((g) => {
      events.push('leaf');
      return mul(g, 2);
    });
    await sum(h).backward();
    expect(events).toEqual(['h1', 'h2:10,10', 'leaf']);
    expect(await values(a.grad)).toEqual([60, 60]);
    expect(removed.active).toBe(false);
  });

  it('runs post-accumulate hooks in the order gradients become ready, awaiting async ones', async () => {
    // y = w2 * tanh(w1 * x): w2's gradient is ready before w1's.
    const w1 = leaf([0.5]);
    const w2 = leaf([2]);
    const x = tensor([1]);
    const events: string[] = [];
    w1.registerPostAccumulateGradHook(async (p) => {
      events.push(`w1 start ${(await p.grad!.read())[0]!.toFixed(4)}`);
      await tick();
      events.push('w1 end');
    });
    w2.registerPostAccumulateGradHook(async () => {
      events.push('w2 start');
      await tick();
      events.push('w2 end');
    });
    await sum(mul(w2, tanh(mul(w1, x)))).backward();
    const dw1 = 2 * (1 - Math.tanh(0.5) ** 2);
    expect(events).toEqual(['w2 start', 'w2 end', `w1 start ${dw1.toFixed(4)}`, 'w1 end']);
  });

  it('accumulates a leaf used twice once, then fires its post-accumulate hook once', async () => {
    const w = leaf([3]);
    let calls = 0;
    w.registerPostAccumulateGradHook(() => {
      calls++;
    });
    await sum(add(mul(w, w), mul(w, 2))).backward();
    expect(calls).toBe(1);
    expect(await values(w.grad)).toEqual([8]);
  });

  it('runs queued callbacks once, after everything, in order, awaiting them', async () => {
    const w = leaf([1, 2]);
    const events: string[] = [];
    w.registerPostAccumulateGradHook(() => {
      events.push('accumulated');
      queueCallback(async () => {
        await tick();
        events.push('final 1');
        queueCallback(() => {
          events.push('final 2 (queued by a callback)');
        });
      });
    });
    await sum(mul(w, w)).backward();
    expect(events).toEqual(['accumulated', 'final 1', 'final 2 (queued by a callback)']);
    expect(() => queueCallback(() => {})).toThrow(
      '[queueCallback] callbacks can only be queued while backward runs',
    );
  });

  it('lets a bucketing hook overlap: start work in the hook, await it in a callback', async () => {
    const ws = [leaf([1]), leaf([2]), leaf([3])];
    const done: number[] = [];
    const pending: Promise<void>[] = [];
    for (const [i, w] of ws.entries()) {
      w.registerPostAccumulateGradHook(() => {
        if (pending.length === 0) queueCallback(async () => void (await Promise.all(pending)));
        pending.push(tick().then(() => void done.push(i)));
      });
    }
    await sum(mul(mul(ws[0]!, ws[1]!), ws[2]!)).backward();
    expect(done.sort()).toEqual([0, 1, 2]);
  });
});

describe('parameter storage under FSDP-style swapping', () => {
  it('uses the storage a parameter holds when backward runs, and names a freed one', async () => {
    const lin = new Linear(2, 2, { bias: false });
    lin.nameTensors();
    const w = lin.weight;
    w.write([1, 2, 3, 4]);
    const x = leaf([1, 1], [1, 2]);
    // Reshard after forward: the parameter's storage is dropped and never rebuilt.
    const y = lin.call(x);
    w.free();
    const error = await sum(y)
      .backward()
      .catch((e: unknown) => e);
    expect(FreedTensorError.isInstance(error)).toBe(true);
    expect((error as Error).message).toBe(
      "[matmul backward] tensor 'weight' was used after its storage was freed",
    );
    // Unshard for forward, reshard after it, and rebuild in a hook on the output (FSDP's
    // pre-backward hook), with other values: backward reads the storage of that moment.
    x.grad = null;
    w.setData(Tensor.empty(backend, [2, 2]).write([1, 2, 3, 4]));
    const z = lin.call(x);
    w.free();
    z.registerHook(() => {
      w.setData(Tensor.empty(backend, [2, 2]).write([10, 20, 30, 40]));
      return undefined;
    });
    await sum(z).backward();
    expect(await values(x.grad)).toEqual([40, 60]);
    expect(await values(w.grad)).toEqual([1, 1, 1, 1]);
  });

  it('backward reads the storage assigned with param.data = view (a flat buffer)', async () => {
    const lin = new Linear(2, 2);
    const w = lin.weight;
    const b = lin.bias!;
    w.write([1, 2, 3, 4]);
    b.write([0, 0]);
    const x = leaf([1, 1], [1, 2]);
    const y = lin.call(x);
    // Reshard after forward, then unshard into views at nonzero offsets of one flat buffer that
    // holds other values: backward must read them, not the storage of forward time.
    w.free();
    b.free();
    const flat = tensor([9, 10, 20, 30, 40, 50, 60, 9]);
    w.data = flat.view([2, 2], 1);
    b.data = flat.view([2], 5);
    await sum(y).backward();
    expect(await values(x.grad)).toEqual([40, 60]);
    expect(await values(w.grad)).toEqual([1, 1, 1, 1]);
    expect(await values(b.grad)).toEqual([1, 1]);
    expect(w.storage()).toBe(flat.storage());
    expect(w.offset).toBe(1);
    expect(w.requiresGrad).toBe(true);
    // data reads back a detached view of the flat buffer.
    const data = w.data;
    expect(data.requiresGrad).toBe(false);
    expect(data.offset).toBe(1);
    expect(await values(data)).toEqual([10, 20, 30, 40]);
  });

  it('accumulates in place into a .grad that is a view of a flat buffer', async () => {
    const flat = tensor([0, 0, 0, 0, 0]);
    const a = leaf([1, 2]);
    const b = leaf([3, 4, 5]);
    a.grad = flat.view([2], 0);
    b.grad = flat.view([3], 2);
    const loss = () => add(sum(mul(a, 2)), sum(mul(b, b)));
    await loss().backward();
    await loss().backward();
    expect(await values(flat)).toEqual([4, 4, 12, 16, 20]);
  });

  it('saves a frozen parameter by reference too, so it can be freed after forward', async () => {
    const lin = new Linear(2, 1, { bias: false });
    lin.weight.requiresGrad = false;
    lin.weight.write([2, 3]);
    const x = leaf([1, 1], [1, 2]);
    const y = lin.call(x);
    const stored = Tensor.empty(backend, [1, 2]).write([5, 7]);
    lin.weight.free();
    lin.weight.setData(stored);
    await sum(y).backward();
    // The storage of backward time, not of forward time.
    expect(await values(x.grad)).toEqual([5, 7]);
    expect(lin.weight.grad).toBeNull();
  });

  it('releases saved activations during backward (visible in memoryStats)', async () => {
    const own = createCpuBackend();
    const w = Tensor.empty(own, [64]).write(new Float32Array(64).fill(0.1));
    w.requiresGrad = true;
    const x = Tensor.empty(own, [64]).write(new Float32Array(64).fill(1));
    const samples: number[] = [];
    const loss = tidy(() => {
      let h = x;
      for (let i = 0; i < 8; i++) {
        h = tanh(mul(h, w));
        h.registerHook(() => {
          samples.push(own.memoryStats().allocated);
          return undefined;
        });
      }
      return sum(h);
    });
    // Each layer's tanh output (64 f32 = one 256 B block) is retained for backward.
    const afterForward = own.memoryStats().allocated;
    await loss.backward();
    const gradBytes = 256;
    expect(afterForward - (own.memoryStats().allocated - gradBytes)).toBe(8 * 256);
    // Hooks fire from the last layer to the first. Between two of them one saved block is
    // released; the first interval also starts buffering w's gradient (one block), so from then on
    // memory drops by a block per layer while backward runs.
    expect(samples).toHaveLength(8);
    expect(samples[1]).toBe(samples[0]);
    for (let i = 2; i < samples.length; i++) expect(samples[i - 1]! - samples[i]!).toBe(256);
  });
});

describe('checkpoint', () => {
  async function gradsOf(useCheckpoint: boolean): Promise<number[][]> {
    const gen = new RandomGenerator(3);
    const lin1 = new Linear(4, 8, { generator: new RandomGenerator(1) });
    const lin2 = new Linear(8, 4, { generator: new RandomGenerator(2) });
    const drop = new Dropout(0.5, { generator: gen });
    const x = leaf(
      Array.from({ length: 8 }, (_, i) => Math.sin(i)),
      [2, 4],
    );
    const block = (h: Tensor) => lin2.call(drop.call(gelu(lin1.call(h))));
    const y = useCheckpoint ? checkpointWith({ generators: [gen] }, block, x) : block(x);
    // Draw from the stream after forward, as later layers would: the recompute must not see this.
    gen.next(1000);
    await sum(mul(y, y)).backward();
    return [await values(x.grad), await values(lin1.weight.grad), await values(lin2.bias!.grad)];
  }

  it('gives the same gradients as no checkpoint, dropout included', async () => {
    const plain = await gradsOf(false);
    const checkpointed = await gradsOf(true);
    expect(checkpointed).toEqual(plain);
    expect(plain[0]!.some((v) => v === 0)).toBe(false);
  });

  it('restores the DEFAULT generator: dropout without its own generator gives the same gradients', async () => {
    async function run(useCheckpoint: boolean): Promise<number[][]> {
      manualSeed(11);
      const lin = new Linear(4, 8, { generator: new RandomGenerator(1) });
      const drop = new Dropout(0.5);
      expect(drop.generator).toBeUndefined();
      const x = leaf(
        Array.from({ length: 8 }, (_, i) => Math.cos(i)),
        [2, 4],
      );
      const block = (h: Tensor) => drop.call(gelu(lin.call(h)));
      const start = getDefaultGenerator().offset;
      // plain checkpoint: no generators named, the default one must be found by itself.
      const y = useCheckpoint ? checkpoint(block, x) : block(x);
      expect(getDefaultGenerator().offset).toBeGreaterThan(start);
      // A later layer draws from the default stream after the checkpointed region, as in a model.
      const z = new Dropout(0.5).call(y);
      const beforeBackward = getDefaultGenerator().offset;
      await sum(mul(z, z)).backward();
      // The recomputation replayed the region's draws, then put the stream back.
      expect(getDefaultGenerator().offset).toBe(beforeBackward);
      return [await values(x.grad), await values(lin.weight.grad), await values(lin.bias!.grad)];
    }
    const plain = await run(false);
    const checkpointed = await run(true);
    expect(checkpointed).toEqual(plain);
    // The masks matter: some of the hidden units were dropped, not all.
    const bias = plain[2]!;
    expect(bias.some((v) => v === 0)).toBe(true);
    expect(bias.some((v) => v !== 0)).toBe(true);
  });

  it('lowers peak memory (memoryStats) for a chain of ops, with the same gradients', async () => {
    const own = createCpuBackend();
    const n = 1024; // one 4 KiB block per activation
    const depth = 36;
    const segments = 6; // about sqrt(depth): the classic trade-off
    /** `count` layers tanh(h * w), each intermediate handle freed as soon as it is consumed. */
    const layers = (h: Tensor, w: Tensor, count: number): Tensor => {
      let out = h;
      for (let i = 0; i < count; i++) {
        const product = mul(out, w);
        const next = tanh(product);
        product.free();
        if (out !== h) out.free();
        out = next;
      }
      return out;
    };
    async function run(useCheckpoint: boolean) {
      const w = Tensor.empty(own, [n]).write(new Float32Array(n).fill(0.9));
      w.requiresGrad = true;
      const x = Tensor.empty(own, [n]).write(Float32Array.from({ length: n }, (_, i) => i / n));
      own.resetPeakMemoryStats();
      const base = own.memoryStats().allocated;
      let h = x;
      for (let s = 0; s < segments; s++) {
        h = useCheckpoint
          ? checkpoint((a: Tensor) => layers(a, w, depth / segments), h)
          : layers(h, w, depth / segments);
      }
      const loss = sum(h);
      const afterForward = own.memoryStats().allocated - base;
      await loss.backward();
      const peak = own.memoryStats().peakAllocated - base;
      const grad = await values(w.grad);
      return { afterForward, peak, grad };
    }
    const plain = await run(false);
    const checkpointed = await run(true);
    // The same gradient, summed over the layers in another order (per segment): f32 rounding.
    expectClose(checkpointed.grad, plain.grad, { rtol: 1e-5, atol: 1e-7 });
    const block = 4 * n;
    // Without checkpointing, forward keeps every layer's tanh output for backward (36 blocks), and
    // backward's temporaries come on top of them (42 blocks measured).
    expect(plain.afterForward).toBeGreaterThanOrEqual(depth * block);
    expect(plain.peak).toBeGreaterThan(depth * block);
    // With it, forward keeps only the segments' outputs (6 blocks); backward holds one segment's
    // recomputed activations (6) at a time on top of them and the same temporaries (20 measured).
    expect(checkpointed.afterForward).toBeLessThanOrEqual((segments + 1) * block);
    expect(checkpointed.peak).toBeLessThan(0.6 * plain.peak);
  });

  it('saves no activations, records a node when only parameters inside require grad', async () => {
    const lin = new Linear(3, 3);
    const x = tensor([1, 2, 3], { shape: [1, 3] });
    const y = checkpoint((h: Tensor) => tanh(lin.call(h)), x);
    expect(y.gradFn?.name).toBe('checkpoint');
    await sum(y).backward();
    expect(lin.weight.grad).not.toBeNull();
    expect(noGrad(() => checkpoint((h: Tensor) => tanh(h), x)).requiresGrad).toBe(false);
  });

  it('finds Dropout generators in a module and supports async functions', async () => {
    const gen = new RandomGenerator(9);
    const drop = new Dropout(0.5, { generator: gen });
    const w = leaf(Array.from({ length: 16 }, () => 1));
    const y = checkpoint(drop, w);
    gen.next(50);
    await sum(y).backward();
    expect(await values(w.grad)).toEqual(await values(y));
    const v = leaf([1, 2]);
    const z = await checkpoint(async (h: Tensor) => {
      await tick();
      return exp(h);
    }, v);
    await sum(z).backward();
    expect(await values(v.grad)).toEqual([Math.exp(1), Math.exp(2)].map(Math.fround));
  });

  it('fires parameter hooks inside the recomputation and callbacks at the outer end', async () => {
    const lin = new Linear(2, 2);
    const x = leaf([1, 2], [1, 2]);
    const events: string[] = [];
    lin.weight.registerPostAccumulateGradHook(() => {
      events.push('weight');
      queueCallback(() => {
        events.push('callback');
      });
    });
    x.registerPostAccumulateGradHook(() => {
      events.push('x');
    });
    await sum(
      checkpoint(
        lin,
        matmul(
          x,
          tensor([
            [1, 0],
            [0, 1],
          ]),
        ),
      ),
    ).backward();
    expect(events).toEqual(['weight', 'x', 'callback']);
  });
});
