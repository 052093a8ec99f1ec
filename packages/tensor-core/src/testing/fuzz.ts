/**
 * [Note: seeded fuzzing]
 *
 * Property-based tests (fast-check) run with a fixed seed, so CI sees the same cases every time and
 * a failure replays from the seed and path fast-check prints. `WEBSHARD_FUZZ_RUNS` sets how many
 * cases every property runs (its default is sized to keep CI within a few seconds), for a longer
 * search: `WEBSHARD_FUZZ_RUNS=20000 pnpm test -- fuzz`; `WEBSHARD_FUZZ_SEED` picks another seed.
 */

/** The default seed of every property. */
export const FUZZ_SEED = 20_2026;

function environment(name: string): string | undefined {
  return typeof process === 'undefined' ? undefined : process.env[name];
}

function positiveInteger(name: string, text: string | undefined): number | undefined {
  if (text === undefined || text === '') return undefined;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new Error(`${name} must be a positive integer, got '${text}'`);
  }
  return value;
}

/**
 * `{ seed, numRuns }` for `fc.assert`: `defaultRuns` and `FUZZ_SEED` unless `WEBSHARD_FUZZ_RUNS` /
 * `WEBSHARD_FUZZ_SEED` say otherwise (see [Note: seeded fuzzing]).
 */
export function fuzzParameters(defaultRuns: number): { seed: number; numRuns: number } {
  return {
    seed: positiveInteger('WEBSHARD_FUZZ_SEED', environment('WEBSHARD_FUZZ_SEED')) ?? FUZZ_SEED,
    numRuns:
      positiveInteger('WEBSHARD_FUZZ_RUNS', environment('WEBSHARD_FUZZ_RUNS')) ?? defaultRuns,
  };
}
