import { readFile } from 'node:fs/promises';
import { createBackend } from '@webshard/tensor-core';
import { DEFAULT_CORPUS_PATH, main } from '@webshard/trainer';
import { describe, expect, it } from 'vitest';
import { DEFAULT_SETTINGS } from './settings.js';
import { TrainingSession } from './training-session.js';

const quiet = { stdout: () => {}, stderr: () => {}, isTTY: false, cwd: process.cwd() };

describe('TrainingSession (the playground worker’s loop, in Node)', () => {
  it("takes webshard-train's steps: the same losses as the CLI on the same text and settings", async () => {
    const steps = 6;
    const cli = await main(
      [
        '--steps',
        String(steps),
        '--backend',
        'cpu',
        '--lr-schedule',
        'cosine',
        '--warmup-steps',
        String(DEFAULT_SETTINGS.warmupSteps),
        '--sample-length',
        '0',
        '--matmul-fma',
        'off',
      ],
      quiet,
    );
    expect(cli.exitCode).toBe(0);
    const expected = cli.summary!.records.map((r) => r.loss);
    const bytes = new Uint8Array(await readFile(DEFAULT_CORPUS_PATH));
    const backend = await createBackend({ kind: 'cpu', matmulFma: 'off' });
    const session = TrainingSession.create(
      bytes,
      'sonnets.txt',
      { ...DEFAULT_SETTINGS, steps, backend: 'cpu' },
      backend,
    );
    try {
      const losses: number[] = [];
      while (!session.finished) losses.push((await session.step()).loss);
      expect(losses).toHaveLength(steps);
      // Recorded at step 2 and replayed after, with the eager step's losses.
      expect(session.captureStatus).toBe('captured');
      for (let i = 0; i < steps; i++) expect(losses[i]).toBeCloseTo(expected[i]!, 6);
      expect(session.parameterCount).toBe(
        cli.summary!.model.parameters().reduce((n, p) => n + p.size, 0),
      );
    } finally {
      session.dispose();
    }
  }, 60_000);

  it('learns: held-out loss falls and the sample changes; release frees the weights and AdamW state', async () => {
    const bytes = new Uint8Array(await readFile(DEFAULT_CORPUS_PATH));
    const backend = await createBackend({ kind: 'cpu' });
    const session = TrainingSession.create(
      bytes,
      'sonnets.txt',
      { ...DEFAULT_SETTINGS, steps: 40, backend: 'cpu' },
      backend,
    );
    const before = await session.heldOutLoss();
    const firstSample = await session.sample(40);
    let last = null;
    while (!session.finished) last = await session.step();
    expect(last!.step).toBe(40);
    expect(last!.tokensPerSecond).toBeGreaterThan(0);
    expect(last!.peakAllocatedBytes).toBeGreaterThanOrEqual(last!.allocatedBytes);
    const after = await session.heldOutLoss();
    expect(after).toBeLessThan(before - 0.8);
    const sample = await session.sample(40);
    expect(sample).not.toBe(firstSample);
    expect(sample.length).toBeGreaterThan(30);
    const held = backend.memoryStats().allocated;
    session.release();
    // Weights and both moments (f32); the model's position ids and masks are caches of the
    // backend, bounded by the block size, and go with it.
    expect(held - backend.memoryStats().allocated).toBeGreaterThanOrEqual(
      12 * session.parameterCount,
    );
    backend.dispose();
  }, 60_000);

  it('refuses a text too short for its block with the trainer’s message', async () => {
    const backend = await createBackend({ kind: 'cpu' });
    expect(() =>
      TrainingSession.create(
        new TextEncoder().encode('too short'),
        'mine.txt',
        DEFAULT_SETTINGS,
        backend,
      ),
    ).toThrow(/--data mine.txt: 9 tokens are too few for --block-size 32/);
    backend.dispose();
  });
});
