import { describe, expect, it } from 'vitest';
import { STRESS_TRANSPORTS } from './job.js';
import { STRESS_REGRESSIONS } from './regressions.js';
import { runSeed } from './run-seed.js';
import { parseStressArgs, randomSeed } from './settings.js';

// The stress harness's CI size ([Note: the stress harness] in cli.ts): a new seed on every run
// (printed; WEBSHARD_STRESS_SEED=N replays one), a few hundred small ops per transport with pauses
// up to 100 ms, then every seed of the regression list.
const seed = Number(process.env.WEBSHARD_STRESS_SEED ?? randomSeed());
const settings = parseStressArgs(['--ci', '--seed', String(seed)]);
console.log(`stress test: seed ${seed} (replay: WEBSHARD_STRESS_SEED=${seed})`);

describe('stress, a new seed', () => {
  for (const transport of STRESS_TRANSPORTS) {
    it(transport, async () => {
      const result = await runSeed(settings, transport, seed);
      console.log(result.lines.join('\n'));
      expect(result.ok, result.lines.join('\n')).toBe(true);
    }, 120_000);
  }
  it('tcp, each rank on its communication worker', async () => {
    const onWorkers = parseStressArgs(['--ci', '--seed', String(seed), '--progress', 'worker']);
    const result = await runSeed(onWorkers, 'tcp', seed);
    console.log(result.lines.join('\n'));
    expect(result.ok, result.lines.join('\n')).toBe(true);
  }, 120_000);
});

describe('stress, the regression seeds', () => {
  for (const regression of STRESS_REGRESSIONS) {
    it(`${regression.transport} seed ${regression.seed}: ${regression.found}`, async () => {
      const args = ['--seed', String(regression.seed), ...regression.args];
      const result = await runSeed(parseStressArgs(args), regression.transport, regression.seed);
      expect(result.ok, result.lines.join('\n')).toBe(true);
    }, 120_000);
  }
});
