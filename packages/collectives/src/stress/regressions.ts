import type { StressTransport } from './job.js';

/**
 * Seeds that ever failed, with the arguments they failed under, replayed by the CI test
 * (stress.test.ts) on every run. A seed names a program of the generator in program.ts as it is:
 * a change to the generator draws other programs from the same seeds, so whoever changes it finds
 * new seeds for the bugs below (run the CLI until each fails again before its fix) and replaces
 * these. A program's first k ops are the same whatever `--ops` (the draws go in order), so an entry
 * runs only as many ops as it needs to fail.
 */
export interface StressRegression {
  readonly seed: number;
  readonly transport: StressTransport;
  /** Arguments of the CLI besides the seed and transport. */
  readonly args: readonly string[];
  /** What it found. */
  readonly found: string;
}

export const STRESS_REGRESSIONS: readonly StressRegression[] = [
  {
    seed: 5,
    transport: 'shm',
    args: ['--ci', '--ops', '20'],
    found:
      'op #13, a reduce-scatter of registered f32 inputs (segment 0) with outputs registered on ranks 0, 1, 3 ' +
      'and not on 2: only rank 2 started an arena round (sharedReduceScatterRegistered), so the all-reduce ' +
      '#14, which copies through the arena, read another set of slots on rank 2 than on the others ' +
      '(fixed on main in 010c12e; with its barrier stamps alone, a CollectiveMismatchError at op #13)',
  },
];
