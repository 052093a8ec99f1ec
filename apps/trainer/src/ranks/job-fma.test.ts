import { createLocalGroups } from '@webshard/collectives';
import { type FmaSupport, relaxedFmaSupport } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { parseOptions } from '../cli/options.js';
import type { TrainConfig } from '../config.js';
import { runMain, TINY } from '../test-support/cli.js';
import { agreeOnFma, fmaOffReason } from './job-fma.js';

const config = (extra: string[] = []) => parseOptions([...TINY, ...extra], '/') as TrainConfig;

describe('the job decides the matmul FMA once', () => {
  it('turns it on only where every rank fuses, at 1, 2 and 3 ranks', async () => {
    const fused = () => 'fused' as FmaSupport;
    expect(await agreeOnFma(config(), null, fused)).toEqual({
      matmulFma: 'auto',
      perRank: ['fused'],
    });
    for (const [answers, expected] of [
      [['fused', 'fused'], 'auto'],
      [['fused', 'none'], 'off'],
      [['fused', 'fused', 'unfused'], 'off'],
    ] as [FmaSupport[], string][]) {
      const groups = createLocalGroups(answers.length, { timeoutMs: 10_000 });
      const jobs = await Promise.all(
        groups.map((group) => agreeOnFma(config(), group, () => answers[group.rank]!)),
      );
      for (const job of jobs) {
        expect(job.matmulFma).toBe(expected);
        expect(job.perRank).toEqual(answers);
      }
      await Promise.all(groups.map((g) => g.close()));
    }
    expect(fmaOffReason({ matmulFma: 'off', perRank: ['fused', 'fused', 'unfused'] })).toBe(
      "matmul FMA off: not every rank fuses relaxed SIMD's multiply-add (rank 2: unfused)",
    );
    expect(fmaOffReason({ matmulFma: 'auto', perRank: ['fused'] })).toBeNull();
  });

  it('--matmul-fma off asks no rank and keeps it off', async () => {
    const asked: number[] = [];
    const job = await agreeOnFma(config(['--matmul-fma', 'off']), null, () => {
      asked.push(0);
      return 'fused';
    });
    expect(job).toEqual({ matmulFma: 'off', perRank: [] });
    expect(asked).toEqual([]);
  });

  it("the trainer's backend line says so: with relaxed FMA by default where the engine fuses, not with --matmul-fma off", async () => {
    const on = await runMain([...TINY], '/');
    const off = await runMain([...TINY, '--matmul-fma', 'off'], '/');
    expect(on.exitCode, on.stderr).toBe(0);
    expect(off.exitCode, off.stderr).toBe(0);
    const line = (out: string) => out.split('\n').find((l) => l.startsWith('backend:')) ?? '';
    expect(line(on.stdout).includes('relaxed FMA')).toBe(relaxedFmaSupport() === 'fused');
    expect(line(off.stdout)).not.toContain('relaxed FMA');
  });

  it('rejects an unknown --matmul-fma by name', () => {
    expect(() => config(['--matmul-fma', 'on'])).toThrow(/--matmul-fma/);
  });
});
