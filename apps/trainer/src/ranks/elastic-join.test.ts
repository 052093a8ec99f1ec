import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { joinStateBytes } from '@webshard/diloco';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  allEnded,
  cli,
  followLog,
  killStarted,
  lines,
  type Started,
  signalAll,
  startCoordinator,
  until,
} from '../test-support/cli-process.js';

// [Note: a diloco join that does not stop the world], end to end over tcp: 2 members of a diloco
// world (H = 4, int8) train; a 3rd process is admitted at a sync point and downloads the state in
// slices from both, while the members hold their uploads for 2 outer syncs of their own (a held
// sender, `WEBSHARD_TRAINER_JOIN_HOLD_SYNCS`): they train through those syncs, the newcomer
// takes part with weight 0, then it loads the snapshot, replays what it missed and trains. All
// three end with the same global copy, bit for bit.
const STEPS = 40;
const RUN = [
  ...['--n-layer', '1', '--n-embd', '32', '--n-head', '2', '--block-size', '16'],
  ...['--strategy', 'diloco', '--inner-steps', '4', '--outer-compression', 'int8'],
  ...['--batch-size', '12', '--steps', String(STEPS), '--backend', 'cpu'],
  ...['--sample-length', '0', '--seed', '7', '--transport', 'tcp'],
];

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'webshard-elastic-join-'));
});
afterAll(async () => {
  killStarted();
  await rm(out, { recursive: true, force: true });
});

function digestAt(member: Started, step: number): string | undefined {
  const all = [...member.stdout().matchAll(/global digest ([0-9a-f]{8}) at step (\d+)/g)];
  return all.filter((m) => Number(m[2]) === step).at(-1)?.[1];
}

it('a newcomer downloads in slices from 2 members while they run 2 outer syncs, then holds their global copy bit for bit', async () => {
  const { coordinator, url } = await startCoordinator(2, 3, 30);
  const log = join(out, 'join.jsonl');
  const follow = followLog(log);
  const hold = { WEBSHARD_TRAINER_JOIN_HOLD_SYNCS: '2' };
  const first = [0, 1].map(() => cli([...RUN, '--elastic', url, '--log-jsonl', log], hold));
  await until(
    'step 6 of the world of 2',
    () => (follow.latest().some((line) => line.event === undefined && line.step! >= 6) ? 1 : null),
    120_000,
  );
  signalAll(first, 'SIGSTOP');
  const joiner = cli([...RUN, '--elastic', url], hold);
  await until('the 3rd waiting', () => (/member 2 waits/.test(coordinator.stdout()) ? 1 : null));
  signalAll(first, 'SIGCONT');
  const results = await allEnded([...first, joiner, coordinator]);
  follow.stop();
  for (const result of results.slice(0, 3)) expect([result!.code, result!.stderr]).toEqual([0, '']);
  expect(results[3]!.code).toBe(0);

  const records = await lines(log);
  const changes = records.filter((line) => line.event === 'membership');
  expect(changes.map((line) => [line.worldSize, line.joined!.length])).toEqual([
    [2, 2],
    [3, 1],
  ]);
  const admitted = changes[1]!.step;
  const steps = records.filter((line) => line.event === undefined);
  expect(steps.map((line) => line.step)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
  const landed = joiner
    .stdout()
    .match(
      /state received, (\d+) bytes from 2 member\(s\) in [\d.]+ s, (\d+) outer sync\(s\) caught up, at step (\d+)/,
    );
  expect(landed).not.toBeNull();
  const [, bytes, caughtUp, at] = landed!.map(Number);
  // The members ran 2 outer syncs (the admission's and the next: their uploads were held for 2)
  // and the inner steps between while the newcomer had no state; it took part in both.
  expect(caughtUp).toBeGreaterThanOrEqual(2);
  expect(at! - admitted).toBeGreaterThanOrEqual(4);
  // Packed losslessly ([Note: a join in planes]): fewer bytes than the join's arrays hold.
  const said = [...first, joiner].map((m) => m.stdout()).join('');
  const parameters = Number(/model: gpt, (\d+) parameters/.exec(said)![1]);
  expect(bytes).toBeGreaterThan(0);
  expect(bytes).toBeLessThan(joinStateBytes(parameters));
  // Its global copy when it landed was the world's, and so is everyone's at the end.
  const atLanding = digestAt(joiner, at!);
  expect(atLanding).toMatch(/^[0-9a-f]{8}$/);
  const end = digestAt(joiner, STEPS);
  expect(end).toMatch(/^[0-9a-f]{8}$/);
  for (const m of first) expect(digestAt(m, STEPS)).toBe(end);
}, 300_000);

// [Note: a member builds before it joins]: a newcomer whose model takes 6 s to build (as GPT-2's
// takes a laptop some 30 s) builds it before it asks to join, so the members train on meanwhile.
// Built after admission, the members waited in the regroup for the whole build: one gap of 6 s or
// more between their steps.
it('a newcomer builds its model before it asks to join: the members never wait for its build', async () => {
  const steps = 160;
  const run = RUN.map((arg, i) => (RUN[i - 1] === '--steps' ? String(steps) : arg));
  const { coordinator, url } = await startCoordinator(2, 3, 30);
  const log = join(out, 'build-first.jsonl');
  const follow = followLog(log);
  // Steps of 100 ms at least, so the job outlasts the newcomer's start and build.
  const slow = { WEBSHARD_TRAINER_SLOW_MS: '100' };
  const first = [0, 1].map(() => cli([...run, '--elastic', url, '--log-jsonl', log], slow));
  await until(
    'step 6 of the world of 2',
    () => (follow.latest().some((line) => line.event === undefined && line.step! >= 6) ? 1 : null),
    120_000,
  );
  const buildMs = 6000;
  const joiner = cli([...run, '--elastic', url], {
    ...slow,
    WEBSHARD_TRAINER_SLOW_BUILD_MS: String(buildMs),
  });
  const results = await allEnded([...first, joiner, coordinator]);
  follow.stop();
  for (const result of results.slice(0, 3)) expect([result!.code, result!.stderr]).toEqual([0, '']);

  const records = await lines(log);
  const changes = records.filter((line) => line.event === 'membership');
  expect(changes.map((line) => [line.worldSize, line.joined!.length])).toEqual([
    [2, 2],
    [3, 1],
  ]);
  const stepLines = records.filter((line) => line.event === undefined);
  expect(stepLines.map((line) => line.step)).toEqual(
    Array.from({ length: steps }, (_, i) => i + 1),
  );
  const gaps = stepLines.slice(1).map((line, i) => line.seconds! - stepLines[i]!.seconds!);
  const widest = Math.max(...gaps);
  const at = stepLines[gaps.indexOf(widest) + 1]!.step;
  console.log(
    `widest gap between the members' steps: ${widest.toFixed(2)} s before step ${at}; admitted at step ${changes[1]!.step}`,
  );
  expect(widest).toBeLessThan(buildMs / 2000);
  const end = digestAt(joiner, steps);
  expect(end).toMatch(/^[0-9a-f]{8}$/);
  for (const m of first) expect(digestAt(m, steps)).toBe(end);
}, 300_000);
