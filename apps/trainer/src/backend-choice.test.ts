import { type Backend, createCpuBackend, NoAdapterError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import {
  type ChoiceDeps,
  chooseAutoBackend,
  decideBackend,
  PROBE_STEPS,
  probeStepMs,
  UNAVAILABLE_CHARS,
} from './backend-choice.js';
import type { TrainConfig } from './config.js';
import { parseOptions } from './cli/options.js';

const parse = (...argv: string[]) => parseOptions(argv, '/home/user/work') as TrainConfig;

describe('decideBackend', () => {
  const swiftShader = 'webgpu: Google / SwiftShader Device (Subzero)';
  it('takes WebGPU when its probe step is shorter, even on a software adapter', () => {
    expect(
      decideBackend(
        { kind: 'cpu', description: 'cpu (wasm-simd)', stepMs: 300 },
        { kind: 'webgpu', description: swiftShader, stepMs: 150 },
      ),
    ).toEqual({
      kind: 'webgpu',
      reason: 'probe step 150 ms on webgpu, 300 ms on cpu: using webgpu (2.0x as fast)',
    });
  });

  it('takes the CPU backend when its step is shorter, and on a tie', () => {
    const cpu = { kind: 'cpu' as const, description: 'cpu', stepMs: 40 };
    expect(decideBackend(cpu, { kind: 'webgpu', description: 'gpu', stepMs: 61 })).toEqual({
      kind: 'cpu',
      reason: 'probe step 61.0 ms on webgpu, 40.0 ms on cpu: using cpu (1.5x as fast)',
    });
    expect(decideBackend(cpu, { kind: 'webgpu', description: 'gpu', stepMs: 40 }).kind).toBe('cpu');
  });

  it('takes whichever backend could be measured, and says why', () => {
    expect(
      decideBackend(
        { kind: 'cpu', description: 'cpu', stepMs: 10 },
        { kind: 'webgpu', unavailable: 'no adapter' },
      ),
    ).toEqual({ kind: 'cpu', reason: 'webgpu is unavailable (no adapter): using cpu' });
    expect(
      decideBackend(
        { kind: 'cpu', unavailable: 'x' },
        { kind: 'webgpu', description: 'gpu', stepMs: 10 },
      ),
    ).toEqual({ kind: 'webgpu', reason: 'cpu is unavailable (x): using webgpu' });
  });

  it('keeps its line short: a long reason for an unavailable backend is cut', () => {
    const long = `no WebGPU adapter found (tried ${'Vulkan, '.repeat(40)}): install a driver`;
    const decision = decideBackend(
      { kind: 'cpu', description: 'cpu', stepMs: 10 },
      { kind: 'webgpu', unavailable: long },
    );
    expect(decision.reason).toBe(
      `webgpu is unavailable (${long.slice(0, UNAVAILABLE_CHARS - 3)}...): using cpu`,
    );
    // The line chooseBackend prints: under 120 characters.
    expect(`backend auto: ${decision.reason} (--backend to override)`.length).toBeLessThan(120);
    const slowest = decideBackend(
      { kind: 'cpu', description: `cpu ${'x'.repeat(300)}`, stepMs: 30000 },
      { kind: 'webgpu', description: `gpu ${'y'.repeat(300)}`, stepMs: 2.5 },
    );
    expect(`backend auto: ${slowest.reason} (--backend to override)`.length).toBeLessThan(120);
  });
});

/** Stand-in backends with scripted probe times; records creations, probes and disposals. */
function fakeDeps(stepMs: { cpu: number; webgpu: number | 'none' }) {
  const log: string[] = [];
  const deps: ChoiceDeps = {
    async create(kind) {
      log.push(`create ${kind}`);
      if (kind === 'webgpu' && stepMs.webgpu === 'none') {
        throw new NoAdapterError(['Vulkan'], 'install a driver');
      }
      return {
        kind,
        description: `fake ${kind}`,
        dispose: () => log.push(`dispose ${kind}`),
      } as unknown as Backend;
    },
    async probe(backend) {
      log.push(`probe ${backend.kind}`);
      return stepMs[backend.kind as 'cpu'] as number;
    },
  };
  return { deps, log };
}

describe('chooseAutoBackend', () => {
  it('probes both backends and disposes the slower one', async () => {
    const { deps, log } = fakeDeps({ cpu: 120, webgpu: 80 });
    const chosen = await chooseAutoBackend(parse(), deps);
    expect(chosen.backend.kind).toBe('webgpu');
    expect(chosen.reason).toMatch(/^probe step 80\.0 ms on webgpu/);
    expect(log).toEqual([
      'create cpu',
      'probe cpu',
      'create webgpu',
      'probe webgpu',
      'dispose cpu',
    ]);
  });

  it('falls back to the CPU backend without an adapter; other errors are not swallowed', async () => {
    const { deps } = fakeDeps({ cpu: 120, webgpu: 'none' });
    const chosen = await chooseAutoBackend(parse(), deps);
    expect(chosen.backend.kind).toBe('cpu');
    expect(chosen.reason).toMatch(/^webgpu is unavailable \(\[webgpu\] no WebGPU adapter found/);
    const failing: ChoiceDeps = {
      ...deps,
      create: async () => {
        throw new TypeError('boom');
      },
    };
    await expect(chooseAutoBackend(parse(), failing)).rejects.toThrow('boom');
  });

  it('ranks of one thread probe once and agree', async () => {
    const { deps, log } = fakeDeps({ cpu: 50, webgpu: 90 });
    const config = parse('--strategy', 'ddp', '--world-size', '2', '--transport', 'local');
    const first = await chooseAutoBackend(config, deps);
    const second = await chooseAutoBackend(config, deps);
    expect([first.backend.kind, second.backend.kind]).toEqual(['cpu', 'cpu']);
    expect(second.reason).toBe(first.reason);
    expect(log.filter((l) => l.startsWith('probe'))).toEqual(['probe cpu', 'probe webgpu']);
  });

  it('a job with browser tabs takes the CPU backend without probing', async () => {
    const { deps, log } = fakeDeps({ cpu: 500, webgpu: 1 });
    const config = parse('--strategy', 'ddp', '--world-size', '2', '--transport', 'ws');
    const withTabs = { ...config, browserRanks: 1 };
    const chosen = await chooseAutoBackend(withTabs, deps);
    expect(chosen.backend.kind).toBe('cpu');
    expect(chosen.reason).toBe(
      '1 browser rank(s): using cpu without a probe (a tab cannot probe as Node does)',
    );
    expect(log).toEqual(['create cpu']);
  });

  it('ranks in threads or processes are probed like one process (their launcher decides once)', async () => {
    const { deps, log } = fakeDeps({ cpu: 500, webgpu: 1 });
    const config = parse('--strategy', 'ddp', '--world-size', '2', '--transport', 'shm');
    expect((await chooseAutoBackend(config, deps)).backend.kind).toBe('webgpu');
    expect(log.filter((l) => l.startsWith('probe'))).toEqual(['probe cpu', 'probe webgpu']);
  });
});

describe('probeStepMs', () => {
  it('times real training steps of the run model and frees what it made', async () => {
    const backend = createCpuBackend();
    const config = parse('--n-layer', '1', '--n-head', '2', '--n-embd', '16', '--block-size', '8');
    const before = backend.memoryStats().allocated;
    let calls = 0;
    let clock = 0;
    // A clock that advances 7 ms per reading: every step measures 7 ms.
    const ms = await probeStepMs(backend, config, 20, () => {
      calls++;
      clock += 7;
      return clock;
    });
    expect(ms).toBe(7);
    expect(calls).toBe(2 * (1 + PROBE_STEPS));
    // Parameters, optimizer state, batch and gradients are freed; what stays is the GPT's cached
    // position ids (8 i32, one 512-byte block of the allocator), which the model keeps private.
    expect(backend.memoryStats().allocated - before).toBeLessThanOrEqual(512);
    backend.dispose();
  });
});
