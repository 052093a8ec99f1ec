import {
  AdamW,
  type Backend,
  createBackend,
  GPT,
  NoAdapterError,
  type Tensor,
  tensor,
} from '@webshard/tensor-core';
import { decayGroups, trainStep } from './train-step.js';
import { buildModel, MLP_IN, MLP_OUT } from './models/build-model.js';
import type { TrainConfig } from './config.js';

/**
 * The run's backend: `--backend cpu|webgpu` as asked, `auto` by a measured probe of the run's own
 * model on each backend ([Note: the trainer's default backend]), saying why it chose. The CLI and a
 * browser rank's page (ranks/browser-page.ts) both choose here, so a tab decides as a Node rank of
 * the same job does.
 */
export async function chooseBackend(
  config: TrainConfig,
  vocabSize: number,
  say: (text: string) => void,
): Promise<Backend> {
  const memory = backendOptions(config);
  if (config.backend !== 'auto') return createBackend({ kind: config.backend, ...memory });
  const { backend, reason } = await chooseAutoBackend(
    config,
    realChoiceDeps(config, vocabSize, memory),
  );
  say(`backend auto: ${reason} (--backend to override)\n`);
  return backend;
}

/** What `createBackend` takes from the run's flags: the memory limit and the matmul's FMA. */
export function backendOptions(config: TrainConfig): {
  memoryLimit?: number;
  matmulFma: 'auto' | 'off';
} {
  return {
    ...(config.memoryLimit === null ? {} : { memoryLimit: config.memoryLimit }),
    matmulFma: config.matmulFma,
  };
}

/**
 * The backend kind every rank of a job uses, decided once by the process that starts the ranks
 * ([Note: one backend for the job] in ranks/job-backend.ts): `--backend` as asked, else the probe
 * of `chooseBackend` (printed once, with `say`), whose backend is then released.
 */
export async function chooseBackendKind(
  config: TrainConfig,
  vocabSize: number,
  say: (text: string) => void,
): Promise<'cpu' | 'webgpu'> {
  if (config.backend !== 'auto') return config.backend;
  const backend = await chooseBackend(config, vocabSize, say);
  const kind = backend.kind;
  backend.dispose();
  return kind;
}

/**
 * [Note: the trainer's default backend]
 * `--backend auto` measures instead of guessing: it builds the run's model (same shape, the
 * configured micro-batch, a vocabulary of the run's size) on the CPU backend and on WebGPU, times
 * a few training steps of it on each (forward, backward, clip, AdamW; one warm-up step first, which
 * pays WebGPU's pipeline compiles), and keeps the backend whose median step is shorter. The trainer
 * prints both times. An adapter's name decides nothing: on a 2-core machine the CPU backend beat
 * WebGPU on SwiftShader and on lavapipe for the default model (2026-11-23, `bench/backends.ts`),
 * but a larger model or a faster adapter can turn that around, and only a measurement knows.
 *
 * The probe takes `PROBE_STEPS` steps after the warm-up, but stops a backend early once its
 * steps have used `PROBE_BUDGET_MS` (then the median of what it measured counts; a warm-up alone
 * counts as one step). Ranks must agree, so a job decides once ([Note: one backend for the job]
 * in ranks/job-backend.ts): ranks in one thread (`--transport local`) share the first one's
 * probe; ranks in worker threads or processes get the decision of the process that starts them
 * (or of rank 0, under a `webshard-run` started by hand); a job with browser tabs takes the CPU
 * backend without a probe (a tab cannot run Node's probe, and may have no adapter).
 * `--backend webgpu|cpu` forces one.
 *
 * The line it prints stays short (the two times and the winner): the adapter's full name is on
 * the `backend:` line that follows.
 */
export const PROBE_STEPS = 3;
export const PROBE_BUDGET_MS = 4000;

/** One backend's probe: its median step, or why it could not be measured. */
export type ProbeResult =
  | { kind: 'cpu' | 'webgpu'; description: string; stepMs: number }
  | { kind: 'cpu' | 'webgpu'; unavailable: string };

/** What `auto` chose, and the sentence the trainer prints. */
export interface BackendDecision {
  kind: 'cpu' | 'webgpu';
  reason: string;
}

const measured = (p: ProbeResult): p is ProbeResult & { stepMs: number; description: string } =>
  'stepMs' in p;

/**
 * The decision from the probes: the shorter measured step wins (a tie goes to the CPU backend,
 * which needs no device); a backend that could not be measured loses to one that was. The reason
 * is one short sentence (why a backend is unavailable is cut to `UNAVAILABLE_CHARS`).
 */
export function decideBackend(cpu: ProbeResult, webgpu: ProbeResult): BackendDecision {
  if (!measured(cpu) && !measured(webgpu)) {
    return {
      kind: 'cpu',
      reason: `no backend could be probed (webgpu: ${cut(webgpu.unavailable)}): using cpu`,
    };
  }
  if (!measured(webgpu)) {
    return { kind: 'cpu', reason: `webgpu is unavailable (${cut(webgpu.unavailable)}): using cpu` };
  }
  if (!measured(cpu)) {
    return { kind: 'webgpu', reason: `cpu is unavailable (${cut(cpu.unavailable)}): using webgpu` };
  }
  const winner = webgpu.stepMs < cpu.stepMs ? webgpu : cpu;
  const loser = winner === cpu ? webgpu : cpu;
  const ratio = loser.stepMs / winner.stepMs;
  return {
    kind: winner.kind,
    reason: `probe step ${fmt(webgpu.stepMs)} ms on webgpu, ${fmt(cpu.stepMs)} ms on cpu: using ${winner.kind} (${ratio.toFixed(1)}x as fast)`,
  };
}

/** The most of an unavailable backend's reason that the `backend auto:` line shows. */
export const UNAVAILABLE_CHARS = 40;

function cut(text: string): string {
  return text.length <= UNAVAILABLE_CHARS ? text : `${text.slice(0, UNAVAILABLE_CHARS - 3)}...`;
}

function fmt(ms: number): string {
  return ms >= 100 ? ms.toFixed(0) : ms.toFixed(1);
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

/** Synthetic inputs and targets of one micro-batch for `model` (values do not matter to time). */
function probeBatch(
  model: ReturnType<typeof buildModel>,
  config: TrainConfig,
  vocabSize: number,
  backend: Backend,
): [Tensor, Tensor] {
  const rows = Math.max(1, Math.floor(config.batchSize / (config.worldSize * config.gradAccum)));
  if (model instanceof GPT) {
    const shape = [rows, config.blockSize];
    const ids = Int32Array.from({ length: rows * config.blockSize }, (_, i) => i % vocabSize);
    const next = Int32Array.from(ids, (id) => (id + 1) % vocabSize);
    return [
      tensor(ids, { backend, dtype: 'i32', shape }),
      tensor(next, { backend, dtype: 'i32', shape }),
    ];
  }
  const x = Float32Array.from({ length: rows * MLP_IN }, (_, i) => Math.sin(i));
  const y = Float32Array.from({ length: rows * MLP_OUT }, (_, i) => Math.cos(i));
  return [
    tensor(x, { backend, shape: [rows, MLP_IN] }),
    tensor(y, { backend, shape: [rows, MLP_OUT] }),
  ];
}

/**
 * The median time of a training step of the run's model on `backend`: one warm-up step, then up to
 * `PROBE_STEPS` more within `PROBE_BUDGET_MS`. The model and batch are freed after.
 */
export async function probeStepMs(
  backend: Backend,
  config: TrainConfig,
  vocabSize: number,
  now: () => number = () => performance.now(),
): Promise<number> {
  const model = buildModel(config, vocabSize, backend);
  const [input, target] = probeBatch(model, config, vocabSize, backend);
  const optimizer = new AdamW(decayGroups(model, 0.1), { lr: 1e-4 });
  const step = async () => {
    const start = now();
    await trainStep(
      model.parameters(),
      optimizer,
      () => {
        if (model instanceof GPT) {
          const out = model.call(input, target);
          out.logits.free();
          return out.loss as Tensor;
        }
        return model.loss(input, target);
      },
      { clip: 1 },
    );
    return now() - start;
  };
  try {
    const times = [await step()];
    let spent = 0;
    const timed: number[] = [];
    while (timed.length < PROBE_STEPS && spent < PROBE_BUDGET_MS) {
      const ms = await step();
      timed.push(ms);
      spent += ms;
    }
    return median(timed.length > 0 ? timed : times);
  } finally {
    input.free();
    target.free();
    for (const state of optimizer.state.values()) {
      state.expAvg.free();
      state.expAvgSq.free();
    }
    for (const t of [...model.parameters(), ...model.buffers()]) t.free();
  }
}

/** Decisions by run config: the ranks of one thread share the first one's probe. */
const decided = new WeakMap<TrainConfig, BackendDecision>();

/** What the choice needs from outside: backends and the probe (tests pass their own). */
export interface ChoiceDeps {
  create(kind: 'cpu' | 'webgpu'): Promise<Backend>;
  probe(backend: Backend): Promise<number>;
}

/**
 * `--backend auto` for one process: probe both backends ([Note: the trainer's default backend])
 * and return the winner, the loser disposed, with the sentence that says why.
 */
export async function chooseAutoBackend(
  config: TrainConfig,
  deps: ChoiceDeps,
): Promise<{ backend: Backend; reason: string }> {
  if (config.browserRanks > 0) {
    return {
      backend: await deps.create('cpu'),
      reason: `${config.browserRanks} browser rank(s): using cpu without a probe (a tab cannot probe as Node does)`,
    };
  }
  const earlier = decided.get(config);
  if (earlier !== undefined) {
    return { backend: await deps.create(earlier.kind), reason: earlier.reason };
  }
  const results: Partial<Record<'cpu' | 'webgpu', { backend: Backend; result: ProbeResult }>> = {};
  for (const kind of ['cpu', 'webgpu'] as const) {
    let backend: Backend;
    try {
      backend = await deps.create(kind);
    } catch (error) {
      if (!NoAdapterError.isInstance(error)) throw error;
      results[kind] = {
        backend: undefined as never,
        result: { kind, unavailable: firstLine(error.message) },
      };
      continue;
    }
    const stepMs = await deps.probe(backend);
    results[kind] = { backend, result: { kind, description: backend.description, stepMs } };
  }
  const cpu = results.cpu as { backend: Backend; result: ProbeResult };
  const webgpu = results.webgpu as { backend: Backend; result: ProbeResult };
  const decision = decideBackend(cpu.result, webgpu.result);
  decided.set(config, decision);
  const loser = decision.kind === 'cpu' ? webgpu : cpu;
  loser.backend?.dispose();
  const winner = decision.kind === 'cpu' ? cpu : webgpu;
  return { backend: winner.backend, reason: decision.reason };
}

function firstLine(text: string): string {
  return text.split('\n')[0] ?? text;
}

/** The real dependencies: tensor-core's backends, and the run's model for the probe. */
export function realChoiceDeps(
  config: TrainConfig,
  vocabSize: number,
  memory: ReturnType<typeof backendOptions>,
): ChoiceDeps {
  return {
    create: (kind) => createBackend({ kind, ...memory }),
    probe: (backend) => probeStepMs(backend, config, vocabSize),
  };
}
