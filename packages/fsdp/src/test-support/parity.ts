import { createLocalGroups, type ProcessGroup } from '@webshard/collectives';
import { AdamW, type Backend, createCpuBackend, type Tensor } from '@webshard/tensor-core';
import type { FsdpOptions } from '../api.js';
import { FullyShardedDataParallel } from '../fully-sharded.js';
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
}

/** What a run produced: the mean loss of each step and the final parameters by name. */
export interface ParityResult {
  readonly losses: number[];
  readonly params: Map<string, Float32Array>;
}

const ADAM = { lr: 0.01, weightDecay: 0.01 };

/** Single-process training on the whole batch: the reference. */
export async function trainSingle(run: ParityRun): Promise<ParityResult> {
  const backend = createCpuBackend();
  const config = run.config ?? SMALL;
  const net = new Net(config, backend, 0);
  const optimizer = new AdamW(net.parameters(), { ...ADAM, lr: run.lr ?? ADAM.lr });
  const losses: number[] = [];
  for (const batch of makeBatches(backend, config, run.steps, run.batch)) {
    const [x, y] = slice(backend, batch, 0, run.batch);
    const loss = await net.call(x, y);
    losses.push(await loss.item());
    await loss.backward();
    optimizer.step();
    optimizer.zeroGrad();
    for (const t of [x, y, loss]) t.free();
  }
  const params = new Map<string, Float32Array>();
  for (const [name, p] of net.namedParameters()) params.set(name, (await p.read()) as Float32Array);
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
  const optimizer = new AdamW(model.parameters(), { ...ADAM, lr: run.lr ?? ADAM.lr });
  const per = run.batch / group.size;
  const losses: number[] = [];
  for (const batch of makeBatches(backend, config, run.steps, run.batch)) {
    const [x, y] = slice(backend, batch, group.rank * per, (group.rank + 1) * per);
    const loss = await model.call(x, y);
    losses.push(await loss.item());
    await loss.backward();
    optimizer.step();
    optimizer.zeroGrad();
    for (const t of [x, y, loss]) t.free();
  }
  const params = new Map<string, Float32Array>();
  await model.summonFullParams(async () => {
    for (const [name, p] of model.namedParameters())
      params.set(name, (await p.read()) as Float32Array);
  });
  return { losses, params };
}

/** `world` ranks in this thread over the `local` transport; each rank's result. */
export async function trainLocal(
  world: number,
  run: ParityRun,
  options: Omit<FsdpOptions, 'group'> = {},
): Promise<ParityResult[]> {
  const groups = createLocalGroups(world, { timeoutMs: 20_000 });
  try {
    return await Promise.all(groups.map((g) => trainRank(g, createCpuBackend(), run, options)));
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
