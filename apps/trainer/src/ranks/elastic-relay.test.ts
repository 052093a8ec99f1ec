import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  allEnded,
  cli,
  killStarted,
  type Line,
  lines,
  listenGuardEnv,
  startCoordinator,
} from '../test-support/cli-process.js';

// [Note: an elastic job over the internet], members behind a NAT: a diloco world of 3 over ws in
// which 2 members listen on nothing (`--no-listen`, with a guard that fails the process if it
// ever opens a listening socket), so their pair is relayed through the one that listens. The
// relay passes frames unchanged, so the losses are those of the same world with every member
// listening, bit for bit.
const STEPS = 12;
const RUN = [
  ...['--n-layer', '1', '--n-embd', '32', '--n-head', '2', '--block-size', '16'],
  ...['--strategy', 'diloco', '--inner-steps', '4', '--outer-compression', 'int8'],
  ...['--batch-size', '12', '--steps', String(STEPS), '--backend', 'cpu'],
  ...['--sample-length', '0', '--seed', '7', '--transport', 'ws'],
];

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'webshard-elastic-relay-'));
});
afterAll(async () => {
  killStarted();
  await rm(out, { recursive: true, force: true });
});

/** A world of 3 (formed at once) whose members pass `flags[i]`; the steps rank 0 logged. */
async function world(name: string, flags: string[][], env: Record<string, string>[]) {
  const { coordinator, url } = await startCoordinator(3, 3, 30);
  const log = join(out, `${name}.jsonl`);
  const members = flags.map((extra, i) =>
    cli([...RUN, '--elastic', url, '--log-jsonl', log, ...extra], env[i]),
  );
  const results = await allEnded([...members, coordinator]);
  for (const result of results.slice(0, 3)) expect([result!.code, result!.stderr]).toEqual([0, '']);
  expect(results[3]!.code).toBe(0);
  const records: Line[] = await lines(log);
  expect(records.filter((line) => line.event === 'membership').map((l) => l.worldSize)).toEqual([
    3,
  ]);
  return records.filter((line) => line.event === undefined).map((line) => line.loss!);
}

it('diloco with 2 of 3 members listening on nothing over ws: they never listen, and the losses are those of the world where all listen', async () => {
  const guard = listenGuardEnv();
  const relayed = await world(
    'relayed',
    [[], ['--no-listen'], ['--no-listen']],
    [{}, guard, guard],
  );
  const direct = await world('direct', [[], [], []], [{}, {}, {}]);
  expect(relayed).toHaveLength(STEPS);
  expect(relayed.every(Number.isFinite)).toBe(true);
  expect(relayed).toEqual(direct);
}, 180_000);

it('the guard holds: a CLI under it that listens (a coordinator) fails, naming the socket', async () => {
  const coordinator = cli(['--elastic-coordinator', '0'], listenGuardEnv());
  const result = await coordinator.done;
  expect(result.code).not.toBe(0);
  expect(result.stderr).toMatch(/\[listen-guard\] pid \d+ opened a listening socket/);
}, 60_000);
