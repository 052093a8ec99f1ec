import { type Backend, createBackend } from '@webshard/tensor-core';
import { decideBackend, type ProbeResult } from '@webshard/trainer/browser';
import type { SessionSettings } from './settings.js';
import { TrainingSession } from './training-session.js';

/** The backend a session trains on, and the sentence the page shows for it. */
export interface BackendChoice {
  backend: Backend;
  reason: string;
}

/** Steps of the probe after its warm-up (which pays WebGPU's shader compiles). */
export const PROBE_STEPS = 2;

/**
 * [Note: the playground's backend]
 * The page trains where it trains fastest, and says so. `cpu` and `webgpu` are taken as asked (a
 * missing adapter is an error the page shows). `auto` uses the CPU backend where the browser has
 * no WebGPU (no `navigator.gpu`, or no adapter: the sentence says which), and otherwise measures,
 * as `webshard-train --backend auto` does ([Note: the trainer's default backend]): a warm-up step
 * and `PROBE_STEPS` steps of the session's own model and batch on each backend, the shorter median
 * wins, and the page shows both times (the trainer's `decideBackend` writes the sentence). A
 * software adapter (SwiftShader, lavapipe) usually loses to the CPU backend on small models; a real
 * GPU wins once the model is large enough.
 */
export async function chooseBackend(
  settings: SessionSettings,
  bytes: Uint8Array,
  name: string,
): Promise<BackendChoice> {
  if (settings.backend !== 'auto') {
    const backend = await createBackend({ kind: settings.backend });
    return { backend, reason: `${backend.kind} (as chosen): ${backend.description}` };
  }
  const gpu = (globalThis as { navigator?: { gpu?: unknown } }).navigator?.gpu;
  if (gpu === undefined) {
    const backend = await createBackend({ kind: 'cpu' });
    return {
      backend,
      reason: `cpu: this browser has no WebGPU (navigator.gpu is missing); ${backend.description}`,
    };
  }
  let webgpu: Backend;
  try {
    webgpu = await createBackend({ kind: 'webgpu' });
  } catch (error) {
    const backend = await createBackend({ kind: 'cpu' });
    return {
      backend,
      reason: `cpu: WebGPU has no adapter here (${(error as Error).message}); ${backend.description}`,
    };
  }
  const cpu = await createBackend({ kind: 'cpu' });
  const probes: ProbeResult[] = [];
  for (const backend of [cpu, webgpu]) {
    probes.push(await probe(backend, settings, bytes, name));
  }
  const decision = decideBackend(probes[0]!, probes[1]!);
  const [chosen, other] = decision.kind === 'cpu' ? [cpu, webgpu] : [webgpu, cpu];
  other.dispose();
  return { backend: chosen, reason: `${decision.reason}; ${chosen.description}` };
}

/** The median step of a throwaway session on `backend` (its model freed after). */
async function probe(
  backend: Backend,
  settings: SessionSettings,
  bytes: Uint8Array,
  name: string,
): Promise<ProbeResult> {
  const kind = backend.kind;
  try {
    const session = TrainingSession.create(bytes, name, { ...settings, steps: 1e9 }, backend);
    try {
      await session.step();
      const times: number[] = [];
      for (let i = 0; i < PROBE_STEPS; i++) times.push((await session.step()).ms);
      times.sort((a, b) => a - b);
      return { kind, description: backend.description, stepMs: times[times.length >> 1]! };
    } finally {
      session.release();
    }
  } catch (error) {
    return { kind, unavailable: (error as Error).message };
  }
}
