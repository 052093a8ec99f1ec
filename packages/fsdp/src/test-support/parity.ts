import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import {
  AdamW,
  type Backend,
  cast,
  createCpuBackend,
  MixedPrecision,
  type Tensor,
} from '@webshard/tensor-core';
import type { FsdpOptions } from '../api.js';
import { FullyShardedDataParallel } from '../fully-sharded.js';
import { clipShardedGradNorm } from '../grad-norm.js';
import { stepOffloaded } from '../ssd/ssd-offload.js';
import { makeBatches, Net, type NetConfig, SMALL, slice } from './models.js';

/** How a parity run trains. */
export interface ParityRun {
  readonly steps: number;
  /** Global rows per step (divisible by the world size). */
  readonly batch: number;
  readonly config?: NetConfig;
  /** Wrap every block in its own unit inside the root unit. */
  readonly nested?: boolean;
  readonly lr?: number;
  /** AdamW's weight decay (default 0.01). */
  readonly weightDecay?: number;
  /** Micro-batches per step: gradients of all but the last accumulate under `noSync`. */
  readonly accumulate?: number;
  /** Clip the gradients to this global norm (`clipShardedGradNorm`) before each step. */
  readonly clip?: number;
  /** The reference computes in this dtype with tensor-core's `MixedPrecision`. */
  readonly computeDtype?: 'f16' | 'bf16';
  /** Under `ssdOffload`, step with `await stepOffloaded(model, optimizer)`, not `optimizer.step()`. */
  readonly stepOffloaded?: boolean;
}

/** What a run produced: the mean loss of each step and the final parameters by name. */
export interface ParityResult {
  readonly losses: number[];
  readonly params: Map<string, Float32Array>;
  /**
   * FSDP runs: each step's collectives that copied an operand through the transport's staging
   * instead of running in place (`stagingStats().stagedOps`, see [Note: flat buffers in registered
   * memory]).
   */
  readonly stagedOps?: number[];
}

const ADAM = { lr: 0.01, weightDecay: 0.01 };

/** Single-process training on the whole batch: the reference. */
export async function trainSingle(
  run: ParityRun,
  backend: Backend = createCpuBackend(),
): Promise<ParityResult> {
  const config = run.config ?? SMALL;
  const net = new Net(config, backend, 0);
  const mp = run.computeDtype ? new MixedPrecision(net, { computeDType: run.computeDtype }) : null;
  const optimizer = new AdamW(mp ? mp.masterParams() : net.parameters(), {
    ...ADAM,
    lr: run.lr ?? ADAM.lr,
    weightDecay: run.weightDecay ?? ADAM.weightDecay,
  });
  const micro = run.accumulate ?? 1;
  const losses: number[] = [];
  for (const batch of makeBatches(backend, config, run.steps, run.batch)) {
    let total = 0;
    for (let m = 0; m < micro; m++) {
      const rows = run.batch / micro;
      const [x, y] = slice(backend, batch, m * rows, (m + 1) * rows);
      const [xc, yc] = mp ? [cast(x, mp.computeDType), cast(y, mp.computeDType)] : [x, y];
      const loss = await net.call(xc, yc);
      total += await loss.item();
      await loss.backward();
      for (const t of new Set([x, y, xc, yc, loss])) t.free();
    }
    losses.push(total / micro);
    if (mp) mp.gradsToMasters();
    optimizer.step();
    optimizer.zeroGrad();
    if (mp) mp.mastersToCompute();
  }
  const params = new Map<string, Float32Array>();
  const named = mp
    ? net.namedParameters().map(([n], i) => [n, mp.masterParams()[i]!] as const)
    : net.namedParameters();
  for (const [name, p] of named) params.set(name, (await p.read()) as Float32Array);
  return { losses, params };
}

/** Wrap `net` as the run asks: every block a unit when nested, the root around everything. */
export function wrapNet(
  net: Net,
  group: ProcessGroup,
  options: Omit<FsdpOptions, 'group'>,
  nested: boolean,
): FullyShardedDataParallel<[Tensor, Tensor], Promise<Tensor>> {
  if (nested) {
    const blocks = [...net.blocks];
    blocks.forEach((b, i) => {
      net.setBlock(i, new FullyShardedDataParallel(b, { ...options, group }));
    });
  }
  return new FullyShardedDataParallel(net, { ...options, group });
}

/** One rank of an FSDP run: its share of each batch, AdamW on the shards. */
export async function trainRank(
  group: ProcessGroup,
  backend: Backend,
  run: ParityRun,
  options: Omit<FsdpOptions, 'group'>,
): Promise<ParityResult> {
  const config = run.config ?? SMALL;
  const model = wrapNet(new Net(config, backend, 0), group, options, run.nested ?? false);
  const optimizer = new AdamW(model.parameters(), {
    ...ADAM,
    lr: run.lr ?? ADAM.lr,
    weightDecay: run.weightDecay ?? ADAM.weightDecay,
  });
  const micro = run.accumulate ?? 1;
  const rows = run.batch / group.size / micro;
  const losses: number[] = [];
  const stagedOps: number[] = [];
  for (const batch of makeBatches(backend, config, run.steps, run.batch)) {
    const staged = group.stagingStats().stagedOps;
    let total = 0;
    for (let m = 0; m < micro; m++) {
      // Rank r's rows of micro-batch m: the single-process run's micro-batch m, split over ranks.
      const start = m * rows * group.size + group.rank * rows;
      const [x, y] = slice(options.computeBackend ?? backend, batch, start, start + rows);
      const step = async (): Promise<void> => {
        const loss = await model.call(x, y);
        total += await loss.item();
        await loss.backward();
        loss.free();
      };
      if (m < micro - 1) await model.noSync(step);
      else await step();
      x.free();
      y.free();
    }
    losses.push(total / micro);
    if (run.clip !== undefined) await clipShardedGradNorm(model, run.clip);
    if (options.ssdOffload && run.stepOffloaded === true) await stepOffloaded(model, optimizer);
    else optimizer.step();
    optimizer.zeroGrad();
    stagedOps.push(group.stagingStats().stagedOps - staged);
  }
  const params = new Map<string, Float32Array>();
  await model.summonFullParams(async () => {
    for (const [name, p] of model.namedParameters())
      params.set(name, (await p.read()) as Float32Array);
  });
  return { losses, params, stagedOps };
}

/** `world` ranks in this thread over the `local` transport; each rank's result. */
export async function trainLocal(
  world: number,
  run: ParityRun,
  options: Omit<FsdpOptions, 'group'> = {},
  backendOf: (rank: number) => Backend = () => createCpuBackend(),
): Promise<ParityResult[]> {
  const groups = createLocalGroups(world, { timeoutMs: 20_000 });
  try {
    return await Promise.all(groups.map((g) => trainRank(g, backendOf(g.rank), run, options)));
  } finally {
    await Promise.all(groups.map((g) => g.close()));
  }
}

/** The mean over ranks of each step's loss (each rank's loss is the mean over its equal share). */
export function meanLosses(results: readonly ParityResult[]): number[] {
  return results[0]!.losses.map(
    (_, s) => results.reduce((sum, r) => sum + r.losses[s]!, 0) / results.length,
  );
}

/** One step's forward and backward on `x`, `y`; returns the loss value it reports. */
export type StepBody = (
  model: { call(x: Tensor, y: Tensor): Tensor | Promise<Tensor> },
  x: Tensor,
  y: Tensor,
) => Promise<number>;

/** How a custom-step run prepares its network before wrapping. */
export interface CustomRun extends ParityRun {
  readonly body: StepBody;
  /** Called on the fresh network (every rank, and the reference) before wrapping. */
  readonly prepare?: (net: Net) => void;
}

/** `trainSingle` with a custom step body: the reference. */
export async function customSingle(run: CustomRun): Promise<ParityResult> {
  const backend = createCpuBackend();
  const config = run.config ?? SMALL;
  const net = new Net(config, backend, 0);
  run.prepare?.(net);
  const optimizer = new AdamW(
    net.parameters().filter((p) => p.requiresGrad),
    { ...ADAM, lr: run.lr ?? ADAM.lr, weightDecay: run.weightDecay ?? ADAM.weightDecay },
  );
  const losses: number[] = [];
  for (const batch of makeBatches(backend, config, run.steps, run.batch)) {
    const [x, y] = slice(backend, batch, 0, run.batch);
    losses.push(await run.body(net, x, y));
    optimizer.step();
    optimizer.zeroGrad();
    x.free();
    y.free();
  }
  const params = new Map<string, Float32Array>();
  for (const [name, p] of net.namedParameters()) params.set(name, (await p.read()) as Float32Array);
  return { losses, params };
}

/** `trainLocal` with a custom step body. */
export async function customLocal(
  world: number,
  run: CustomRun,
  options: Omit<FsdpOptions, 'group'> = {},
): Promise<ParityResult[]> {
  const groups = createLocalGroups(world, { timeoutMs: 20_000 });
  const config = run.config ?? SMALL;
  try {
    return await Promise.all(
      groups.map(async (group) => {
        const backend = createCpuBackend();
        const net = new Net(config, backend, 0);
        run.prepare?.(net);
        const model = wrapNet(net, group, options, run.nested ?? false);
        const optimizer = new AdamW(model.parameters(), {
          ...ADAM,
          lr: run.lr ?? ADAM.lr,
          weightDecay: run.weightDecay ?? ADAM.weightDecay,
        });
        const per = run.batch / world;
        const losses: number[] = [];
        for (const batch of makeBatches(backend, config, run.steps, run.batch)) {
          const [x, y] = slice(backend, batch, group.rank * per, (group.rank + 1) * per);
          losses.push(await run.body(model, x, y));
          optimizer.step();
          optimizer.zeroGrad();
          x.free();
          y.free();
        }
        const params = new Map<string, Float32Array>();
        await model.summonFullParams(async () => {
          for (const [name, p] of model.namedParameters()) {
            params.set(name, (await p.read()) as Float32Array);
          }
        });
        return { losses, params };
      }),
    );
  } finally {
    await Promise.all(groups.map((g) => g.close()));
  }
}
