import { describe, expect, it } from 'vitest';
import {
  AdamW,
  backward,
  CapturedStep,
  clipGradNorm,
  Dropout,
  GELU,
  GPT,
  Linear,
  mseLoss,
  noGrad,
  type Module,
  type Optimizer,
  RandomGenerator,
  SGD,
  Sequential,
  type Tensor,
  tensor,
  tidy,
} from '../index.js';
import type { Backend } from '../backend/backend.js';
import { createCpuBackend } from '../runtime.js';
import { describeBackends } from '../testing/index.js';

const backend: Backend = createCpuBackend();

/** One training step as the trainer's: loss, backward, clip, step, clear. Returns [loss]. */
type Step = (inputs: readonly Tensor[]) => Promise<readonly Tensor[]>;

interface Run {
  losses: number[];
  norms: number[];
  params: Uint32Array[];
}

interface Setup {
  params: Tensor[];
  optimizer: Optimizer<object, object>;
  loss: (inputs: readonly Tensor[]) => Tensor;
  clip: number;
}

function stepOf(setup: Setup, norms: number[]): Step {
  return async (inputs) => {
    const loss = tidy(() => setup.loss(inputs));
    await backward(loss);
    await clipGradNorm(setup.params, setup.clip, { onTotal: (n) => norms.push(n) });
    setup.optimizer.step();
    setup.optimizer.zeroGrad();
    return [loss];
  };
}

/**
 * `steps` steps on batches from `batch(i)`, the learning rate moving every step (a schedule), run
 * eagerly or through a `CapturedStep`; the losses, norms and final parameters' bits.
 */
async function train(
  setup: Setup,
  batch: (i: number) => Tensor[],
  steps: number,
  captured: boolean,
  beforeRun?: (i: number) => void,
): Promise<Run & { step?: CapturedStep }> {
  const norms: number[] = [];
  const fn = stepOf(setup, norms);
  const step = captured ? new CapturedStep(fn) : undefined;
  const losses: number[] = [];
  for (let i = 0; i < steps; i++) {
    for (const group of setup.optimizer.paramGroups as unknown as { lr: number }[])
      group.lr = 1e-2 / (i + 1);
    const inputs = batch(i);
    beforeRun?.(i);
    const outputs = step ? await step.run(inputs) : await fn(inputs);
    losses.push(await outputs[0]!.item());
    if (!step) outputs[0]!.free();
    for (const t of inputs) t.free();
  }
  const params = await Promise.all(
    setup.params.map(async (p) => new Uint32Array((await p.read()).slice().buffer)),
  );
  return { losses, norms, params, step };
}

function ids(seed: number, rows: number, cols: number, vocab: number, on = backend): Tensor {
  const data = Array.from({ length: rows * cols }, (_, i) => (i * 7 + seed * 13 + 3) % vocab);
  return tensor(data, { backend: on, dtype: 'i32', shape: [rows, cols] });
}

function gptSetup(backend: Backend): Setup {
  const model = new GPT(
    { vocabSize: 13, blockSize: 8, nLayer: 2, nHead: 2, nEmbd: 16, dropout: 0, bias: true },
    { backend, generator: new RandomGenerator(1) },
  );
  const params = model.parameters();
  return {
    params,
    optimizer: new AdamW(
      [
        { params: params.filter((p) => p.rank >= 2), weightDecay: 0.1 },
        { params: params.filter((p) => p.rank < 2), weightDecay: 0 },
      ],
      { lr: 1e-2, betas: [0.9, 0.95] },
    ) as unknown as Optimizer<object, object>,
    loss: ([x, y]) => {
      const out = model.call(x!, y!);
      out.logits.free();
      return out.loss!;
    },
    // Small enough that the clip scales some steps and not others.
    clip: 1.3,
  };
}

function mlpSetup(on: Backend = backend): Setup {
  const generator = new RandomGenerator(2);
  const model: Module<[Tensor], Tensor> = new Sequential(
    new Linear(8, 16, { backend: on, generator }),
    new GELU(),
    new Linear(16, 4, { backend: on, generator }),
  );
  const params = model.parameters();
  return {
    params,
    optimizer: new SGD(params, {
      lr: 1e-2,
      momentum: 0.9,
      weightDecay: 1e-3,
    }) as unknown as Optimizer<object, object>,
    loss: ([x, y]) => mseLoss(model.call(x!), y!),
    clip: Number.POSITIVE_INFINITY,
  };
}

function floats(seed: number, rows: number, cols: number, on = backend): Tensor {
  const data = Array.from({ length: rows * cols }, (_, i) => Math.sin(i * 0.37 + seed) * 2);
  return tensor(data, { backend: on, shape: [rows, cols] });
}

const mlpBatch =
  (rows: (i: number) => number, on = backend) =>
  (i: number) => [floats(i, rows(i), 8, on), floats(i + 100, rows(i), 4, on)];

// The same steps on every backend: on WebGPU a replay queues the commands each kernel call queued
// at the capture ([Note: a captured step on WebGPU]), and gives the eager bits all the same.
describeBackends('CapturedStep (a step recorded once and replayed)', (ctx) => {
  it('gives the eager steps bit for bit on the GPT with AdamW, a schedule and the clip', async () => {
    const on = ctx.backend;
    const batch = (i: number) => [ids(i, 4, 8, 13, on), ids(i + 1, 4, 8, 13, on)];
    const eager = await train(gptSetup(on), batch, 6, false);
    // The kernel calls a replay makes itself (not in a host step): every matmul on the CPU, none on
    // WebGPU, whose replay queues the capture's commands instead of calling the kernels.
    const kernels = Object.getPrototypeOf(on) as { matmul: (...args: unknown[]) => unknown };
    const matmul = kernels.matmul;
    let calls = 0;
    kernels.matmul = function (this: unknown, ...args: unknown[]) {
      calls++;
      return matmul.apply(this, args);
    };
    let replayCalls = 0;
    let captured: Awaited<ReturnType<typeof train>>;
    try {
      captured = await train(gptSetup(on), batch, 6, true, (i) => {
        // Runs 0 and 1 warm up and capture; 2 to 5 replay.
        if (i === 2) calls = 0;
      });
      replayCalls = calls;
    } finally {
      kernels.matmul = matmul;
    }
    expect(captured.step!.status).toBe('captured');
    expect(captured.step!.stats).toMatchObject({ eagerRuns: 1, captures: 1, replays: 4 });
    expect(replayCalls === 0).toBe(ctx.kind === 'webgpu');
    expect(captured.losses).toEqual(eager.losses);
    expect(captured.norms).toEqual(eager.norms);
    // The clip scaled on some steps and not others, so its host step decided at each replay.
    expect(eager.norms.some((n) => n > 1.3)).toBe(true);
    expect(eager.norms.some((n) => n <= 1.3)).toBe(true);
    expect(captured.params).toEqual(eager.params);
    captured.step!.dispose();
  });

  it('gives the eager steps bit for bit on an MLP with SGD and momentum', async () => {
    const batch = mlpBatch(() => 6, ctx.backend);
    const eager = await train(mlpSetup(ctx.backend), batch, 5, false);
    const captured = await train(mlpSetup(ctx.backend), batch, 5, true);
    expect(captured.step!.stats).toMatchObject({ eagerRuns: 1, captures: 1, replays: 3 });
    expect(captured.losses).toEqual(eager.losses);
    expect(captured.params).toEqual(eager.params);
  });

  it('runs a step whose input shapes changed eagerly, and replays again when they match', async () => {
    const batch = mlpBatch((i) => (i === 3 ? 3 : 6), ctx.backend);
    const eager = await train(mlpSetup(ctx.backend), batch, 6, false);
    const captured = await train(mlpSetup(ctx.backend), batch, 6, true);
    expect(captured.step!.stats).toMatchObject({ eagerRuns: 2, captures: 1, replays: 3 });
    expect(captured.losses).toEqual(eager.losses);
    expect(captured.params).toEqual(eager.params);
  });
});

describe('CapturedStep refusals', () => {
  it('refuses a step that reads back outside a host step, and runs it eagerly', async () => {
    const setup = mlpSetup();
    const norms: number[] = [];
    const inner = stepOf(setup, norms);
    const step = new CapturedStep(async (inputs) => {
      const [loss] = await inner(inputs);
      if ((await loss!.item()) > 1e9) throw new Error('diverged');
      return [loss!];
    });
    const batch = mlpBatch(() => 6);
    for (let i = 0; i < 3; i++) await step.run(batch(i));
    expect(step.status).toBe('refused');
    expect(step.refusal).toContain('read');
    expect(step.stats).toMatchObject({ eagerRuns: 2, captures: 1, replays: 0 });
  });

  it("refuses a capture at an optimizer's first step (its state outlives the step)", async () => {
    const setup = mlpSetup();
    const step = new CapturedStep(stepOf(setup, []), { warmup: 0 });
    await step.run(mlpBatch(() => 6)(0));
    expect(step.status).toBe('refused');
    expect(step.refusal).toContain('outlive');
  });

  it('leaves nothing behind when the step fails while it records, and records at the next run', async () => {
    const setup = mlpSetup();
    const inner = stepOf(setup, []);
    let fail = false;
    const step = new CapturedStep(async (inputs) => {
      if (fail) {
        // Fail after the step allocated and freed some memory (the plan has free blocks).
        noGrad(() => tidy(() => setup.loss(inputs))).free();
        throw new Error('the batch was bad');
      }
      return inner(inputs);
    });
    const batch = mlpBatch(() => 6);
    const [warmupLoss] = await step.run(batch(0));
    // The next run frees the warm-up's loss (the outputs live until the next run), nothing else.
    const lossBytes = warmupLoss!.kernel('test').storage.byteSize;
    const next = batch(1);
    const before = backend.memoryStats().allocated;
    fail = true;
    await expect(step.run(next)).rejects.toThrow('the batch was bad');
    expect(backend.memoryStats().allocated).toBe(before - lossBytes);
    fail = false;
    await step.run(next);
    await step.run(batch(2));
    expect(step.status).toBe('captured');
    expect(step.stats).toMatchObject({ eagerRuns: 1, captures: 1, replays: 1 });
  });

  it('refuses a step that draws random numbers (dropout), whose replay would repeat them', async () => {
    const generator = new RandomGenerator(3);
    const model = new Sequential(
      new Linear(8, 16, { backend, generator }),
      new Dropout(0.5, { generator }),
      new Linear(16, 4, { backend, generator }),
    );
    const params = model.parameters();
    const setup: Setup = {
      params,
      optimizer: new SGD(params, { lr: 1e-2 }) as unknown as Optimizer<object, object>,
      loss: ([x, y]) => mseLoss(model.call(x!), y!),
      clip: Number.POSITIVE_INFINITY,
    };
    const step = new CapturedStep(stepOf(setup, []));
    for (let i = 0; i < 3; i++) await step.run(mlpBatch(() => 6)(i));
    expect(step.status).toBe('refused');
    expect(step.refusal).toContain('random');
  });

  it("refuses a capture while another call chain uses the backend, with each step's bits", async () => {
    const batch = mlpBatch(() => 6);
    const eager = await Promise.all([
      train(mlpSetup(), batch, 4, false),
      train(mlpSetup(), batch, 4, false),
    ]);
    // Two models stepped concurrently in one thread, as thread ranks are: each one's capture sees
    // the other's kernels, which its replay would not redo.
    const [a, b] = await Promise.all([
      train(mlpSetup(), batch, 4, true),
      train(mlpSetup(), batch, 4, true),
    ]);
    expect(a!.losses).toEqual(eager[0]!.losses);
    expect(b!.losses).toEqual(eager[1]!.losses);
    expect(a!.params).toEqual(eager[0]!.params);
    expect(b!.params).toEqual(eager[1]!.params);
    expect([a!.step!.refusal, b!.step!.refusal].join()).toContain('another call chain');
  });
});
