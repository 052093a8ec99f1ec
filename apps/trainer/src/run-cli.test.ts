import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ArgumentError, loadSafetensors } from '@webshard/tensor-core';
import { describeBackends } from '@webshard/tensor-core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatStep, runCli } from './run-cli.js';
import { learningRate } from './train.js';

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'webshard-train-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

describe('webshard-train', () => {
  it('trains a few steps on the shipped corpus with a falling loss, then saves and samples', async () => {
    const lines: string[] = [];
    const ran = await runCli(['--backend', 'cpu', '--steps', '8', '--seed', '3', '--out', out], {
      log: (line) => lines.push(line),
    });
    const { result, checkpoint, sample } = ran!;
    const losses = result.records.map((r) => r.loss);
    expect(losses).toHaveLength(8);
    // ln(66) = 4.19 is the loss of a uniform guess over the 66 characters; 8 steps learn the
    // character frequencies, which alone are worth more than half a nat.
    expect(losses[0]).toBeGreaterThan(4.0);
    expect(losses[0]).toBeLessThan(4.4);
    expect(losses.at(-1)!).toBeLessThan(losses[0]! - 0.5);
    expect(lines[0]).toBe('backend: cpu (CPU (TypeScript kernels))');
    const steps = lines.filter((l) => l.startsWith('step '));
    expect(steps).toHaveLength(8);
    expect(steps[7]).toMatch(
      /^step 8\/8 \| loss \d\.\d{4} \| lr \d\.\d\de-\d \| \d+ tok\/s \| \d+\.\d ms$/,
    );

    const saved = await loadSafetensors(checkpoint, { backend: result.model.wte.weight.backend });
    expect(Object.keys(saved.tensors)).toEqual([...result.model.stateDict().keys()]);
    expect(saved.tensors['lm_head.weight']!.shape).toEqual([66, 64]);
    expect(JSON.parse(saved.metadata.config!)).toEqual(result.model.config);
    expect(await saved.tensors['transformer.ln_f.bias']!.read()).toEqual(
      await result.model.lnF.bias!.read(),
    );
    expect(await readFile(join(out, 'sample.txt'), 'utf8')).toBe(sample);
    expect(sample).toHaveLength(201);
  });

  it('stops at the --max-seconds budget, saying so, and saves what it trained', async () => {
    const lines: string[] = [];
    const ran = await runCli(
      [
        '--backend',
        'cpu',
        '--steps',
        '1000',
        '--max-seconds',
        '1',
        '--sample-length',
        '0',
        '--out',
        out,
      ],
      { log: (line) => lines.push(line) },
    );
    const trained = ran!.result.records.length;
    expect(trained).toBeGreaterThan(0);
    expect(trained).toBeLessThan(1000);
    expect(lines).toContain(
      `stopped after step ${trained} of 1000: the 1 s budget is spent (--max-seconds 0 trains every step)`,
    );
    expect(lines.find((l) => l.startsWith('trained '))).toMatch(
      new RegExp(`^trained ${trained} steps in \\d+\\.\\d s`),
    );
    await expect(runCli(['--max-seconds', 'soon'], { log: () => {} })).rejects.toThrow(
      new ArgumentError('webshard-train', '--max-seconds soon is not a non-negative integer'),
    );
  });

  it('rejects bad options with the option in the message', async () => {
    const quiet = { log: () => {} };
    await expect(runCli(['--steps', '0'], quiet)).rejects.toThrow(
      new ArgumentError('webshard-train', '--steps 0 is not a positive integer'),
    );
    await expect(runCli(['--backend', 'tpu'], quiet)).rejects.toThrow(
      new ArgumentError('webshard-train', '--backend tpu is not one of auto, cpu, webgpu'),
    );
    await expect(runCli(['--sample-length=-1'], quiet)).rejects.toThrow(
      new ArgumentError('webshard-train', '--sample-length -1 is not a non-negative integer'),
    );
    await expect(runCli(['--stepz', '3'], quiet)).rejects.toThrow("Unknown option '--stepz'");
  });

  it('prints the usage for --help', async () => {
    const lines: string[] = [];
    expect(await runCli(['--help'], { log: (l) => lines.push(l) })).toBeNull();
    expect(lines[0]).toMatch(/^Usage: webshard-train/);
  });

  it('formats one progress line per step', () => {
    expect(
      formatStep({
        step: 7,
        steps: 200,
        loss: 2.345678,
        gradNorm: 1,
        lr: 0.003,
        ms: 93.21,
        tokensPerSecond: 5493.1,
      }),
    ).toBe('step   7/200 | loss 2.3457 | lr 3.00e-3 | 5493 tok/s | 93.2 ms');
  });
});

/*
 * The CLI on each backend the tensor-core suites run on, named explicitly with --backend (so the
 * WebGPU one runs on SwiftShader too, which `auto` would pass over: [Note: the trainer's default
 * backend]). The WebGPU suite is declared only where `describeBackends` finds an adapter (and
 * WEBSHARD_BACKENDS allows it), as every other WebGPU test.
 */
describeBackends('webshard-train --backend <kind>', (ctx) => {
  it('trains a few steps, printing a progress line per step, with a finite, falling loss', async () => {
    const lines: string[] = [];
    const ran = await runCli(
      [
        ...['--backend', ctx.kind, '--steps', '4', '--seed', '3', '--batch-size', '4'],
        ...['--sample-length', '0', '--out', out],
      ],
      { log: (line) => lines.push(line) },
    );
    const { result, backend } = ran!;
    try {
      expect(backend.kind).toBe(ctx.kind);
      expect(lines[0]).toMatch(new RegExp(`^backend: ${ctx.kind} \\(.+\\)$`));
      const steps = lines.filter((l) => l.startsWith('step '));
      expect(steps).toHaveLength(4);
      steps.forEach((line, i) => {
        expect(line).toMatch(
          new RegExp(
            `^step ${i + 1}/4 \\| loss \\d\\.\\d{4} \\| lr \\d\\.\\d\\de-\\d \\| \\d+ tok/s \\| \\d+\\.\\d ms$`,
          ),
        );
      });
      const losses = result.records.map((r) => r.loss);
      expect(losses.every(Number.isFinite)).toBe(true);
      expect(Number.isFinite(result.validationLoss)).toBe(true);
      expect(losses.at(-1)!).toBeLessThan(losses[0]!);
    } finally {
      backend.dispose();
    }
  });
});

describe('learningRate', () => {
  it("follows nanoGPT's warm-up and cosine decay to a tenth", () => {
    expect(learningRate(0, 100, 1, 10)).toBeCloseTo(1 / 11, 12);
    expect(learningRate(9, 100, 1, 10)).toBeCloseTo(10 / 11, 12);
    expect(learningRate(10, 100, 1, 10)).toBe(1);
    expect(learningRate(99, 100, 1, 10)).toBeCloseTo(0.1, 12);
    // Halfway through the decay, the cosine is at its midpoint: (1 + 0.1) / 2.
    expect(learningRate(10 + 89 / 2, 100, 1, 10)).toBeCloseTo(0.55, 12);
  });
});
