import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
import { freezeSecondMember } from '../test-support/frozen-member.js';

// [Note: diloco members that come and go], end to end over tcp and ws: 3 members of a diloco
// world (H = 4, int8); one dies between syncs (SIGKILL after its 6th step: its 8th fault point, the
// first two the set-up's and the first epoch's digest exchange), the survivors find
// it at the sync of step 8 and run that sync again as 2; a 4th process started with the same
// command is admitted at a later sync, downloads the world's state in slices while the others
// train on, and ends with their global copy, bit for bit (the digest every member prints of it). All finish with exit 0 and a loss near an uninterrupted run.
const STEPS = 40;
const MODEL = ['--n-layer', '1', '--n-embd', '32', '--n-head', '2', '--block-size', '16'];
const DILOCO = ['--strategy', 'diloco', '--inner-steps', '4', '--outer-compression', 'int8'];
const RUN = [
  ...MODEL,
  ...DILOCO,
  ...['--batch-size', '12', '--steps', String(STEPS), '--backend', 'cpu'],
  ...['--sample-length', '0', '--seed', '7'],
];

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'webshard-elastic-diloco-'));
});
afterAll(async () => {
  killStarted();
  await rm(out, { recursive: true, force: true });
});

/** The digests a member printed of the global copy, by step. */
function digests(member: Started): Map<number, string> {
  const found = new Map<number, string>();
  for (const m of member.stdout().matchAll(/global digest ([0-9a-f]{8}) at step (\d+)/g)) {
    found.set(Number(m[2]), m[1]!);
  }
  return found;
}

it.each(['tcp', 'ws'])(
  'diloco through 3 -> 2 -> 3 members over %s: exit 0, the joiner holds the global copy bit for bit, the loss of an uninterrupted run',
  async (transport) => {
    const { coordinator, url } = await startCoordinator(2, 3, 30);
    const log = join(out, `diloco-${transport}.jsonl`);
    const follow = followLog(log);
    const member = (env: Record<string, string> = {}) =>
      cli([...RUN, '--transport', transport, '--elastic', url, '--log-jsonl', log], env);
    const first = [member(), member(), member({ WEBSHARD_TRAINER_KILL_AT: '8' })];
    const survivors = await until(
      'a step of the world of 2',
      () => {
        const read = follow.latest();
        const changes = read.filter((line) => line.event === 'membership');
        if (changes.length < 2 || read.at(-1)!.event !== undefined) return null;
        return first.filter((m) => m.child.exitCode === null && m.child.signalCode === null);
      },
      60_000,
    );
    signalAll(survivors, 'SIGSTOP');
    const joiner = member();
    await until('the 4th waiting', () => (/member 3 waits/.test(coordinator.stdout()) ? 1 : null));
    signalAll(survivors, 'SIGCONT');
    const [a, b, victim, c, ended] = await allEnded([...first, joiner, coordinator]);
    follow.stop();
    expect(victim!.signal).toBe('SIGKILL');
    for (const result of [a!, b!, c!]) expect([result.code, result.stderr]).toEqual([0, '']);
    expect(ended!.code).toBe(0);

    const records = await lines(log);
    const changes = records.filter((line) => line.event === 'membership');
    expect(changes.map((line) => [line.worldSize, line.left!.length, line.joined!.length])).toEqual(
      [
        [3, 0, 3],
        [2, 1, 0],
        [3, 0, 1],
      ],
    );
    // The member died after step 6; the survivors met it missing at the sync of step 8.
    expect(changes[1]!.step).toBe(8);
    // Admitted at a sync point, after the world of 2 trained.
    expect(changes[2]!.step % 4).toBe(0);
    expect(changes[2]!.step).toBeGreaterThan(8);
    const steps = records.filter((line) => line.event === undefined);
    expect(steps.map((line) => line.step)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
    // The first epoch's members built one model from the seed: its global copy was not sent.
    for (const m of first) {
      expect(m.stdout()).toContain(
        "elastic: every member held rank 0's outer.global already (digests alike): not sent",
      );
    }
    // The joiner downloads the state while the survivors train on ([Note: a diloco join that does
    // not stop the world]); once it landed its global copy is theirs: the same bits at the end.
    expect(joiner.stdout()).toMatch(/state received, \d+ bytes from 2 member\(s\)/);
    const joinerDigest = digests(joiner).get(STEPS);
    expect(joinerDigest).toMatch(/^[0-9a-f]{8}$/);
    const live = first.filter((m) => m !== first[2]);
    for (const m of live) expect(digests(m).get(STEPS)).toBe(joinerDigest);

    // The same run never interrupted: 3 members throughout.
    const plain = cli([
      ...RUN,
      ...['--world-size', '3', '--transport', 'local'],
      ...['--log-jsonl', join(out, `plain-${transport}.jsonl`)],
    ]);
    expect((await allEnded([plain]))[0]!.code).toBe(0);
    const reference = await lines(join(out, `plain-${transport}.jsonl`));
    // Each step's loss is one member's own batch between syncs: a mean over the last 16 steps.
    const mean = (xs: typeof steps) => xs.slice(-16).reduce((sum, l) => sum + l.loss!, 0) / 16;
    const change = (mean(steps) - mean(reference)) / mean(reference);
    console.log(
      `elastic diloco 3 -> 2 -> 3 over ${transport}: mean loss of the last 16 steps ${mean(steps).toFixed(4)} against ${mean(reference).toFixed(4)} uninterrupted (${(100 * change).toFixed(2)} %)`,
    );
    // Issue 34's bound: a member lost and a newcomer admitted cost at most 3 % of the loss. How
    // many steps the world of 2 takes (fewer tokens a step) depends on when the freeze lands; since
    // the newcomer downloads while the others train and starts a fresh AdamW ([Note: a compressed
    // join]), the run ends below the uninterrupted one: -1.98, -2.33, -3.21 % over tcp and -1.50 %
    // over ws in 4 runs (before that join, 0.15-1.48 % either way in 12). So the cost is bounded at
    // 3 % and the run's distance either way at 5 %: a run that went elsewhere still fails.
    expect(change).toBeLessThan(0.03);
    expect(Math.abs(change)).toBeLessThan(0.05);
  },
  // Above the sum of its bounded waits, so that a wait that times out says which process hung.
  240_000,
);

it('diloco with topk under --elastic over tcp: 2 members train and sync sparse pseudo-gradients to the end, exit 0', async () => {
  const { coordinator, url } = await startCoordinator(2, 2, 30);
  const log = join(out, 'diloco-topk.jsonl');
  const run = [
    ...MODEL,
    ...['--strategy', 'diloco', '--inner-steps', '4', '--outer-compression', 'topk'],
    ...['--batch-size', '12', '--steps', '12', '--backend', 'cpu', '--sample-length', '0'],
    ...['--seed', '7', '--transport', 'tcp', '--elastic', url, '--log-jsonl', log],
  ];
  const members = [cli(run), cli(run)];
  const results = await allEnded([...members, coordinator]);
  for (const result of results.slice(0, 2)) expect([result!.code, result!.stderr]).toEqual([0, '']);
  expect(results[2]!.code).toBe(0);
  const records = await lines(log);
  const changes = records.filter((line) => line.event === 'membership');
  expect(changes.map((line) => [line.worldSize, line.left!.length, line.joined!.length])).toEqual([
    [2, 0, 2],
  ]);
  // Both hold the same global copy when the world forms, and every step of the run is logged.
  const [a, b] = members.map(digests);
  expect(a!.get(0)).toMatch(/^[0-9a-f]{8}$/);
  expect(b!.get(0)).toBe(a!.get(0));
  const steps = records.filter((line) => line.event === undefined);
  expect(steps.map((line) => line.step)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
  for (const line of steps) expect(Number.isFinite(line.loss)).toBe(true);
  // A sync step's line holds its sync, as without --elastic: topk's bytes are fixed by the size.
  const synced = steps.filter((line) => line.outerBytesSent !== undefined);
  expect(synced.map((line) => line.step)).toEqual([4, 8, 12]);
  expect(new Set(synced.map((line) => line.outerBytesSent)).size).toBe(1);
  // The same bytes as a run without --elastic (run's last 6: the transport, elastic and log).
  const plainLog = join(out, 'diloco-topk-plain.jsonl');
  const reference = cli([
    ...run.slice(0, -6),
    ...['--world-size', '2', '--transport', 'local', '--log-jsonl', plainLog],
  ]);
  expect((await reference.done).code).toBe(0);
  const referenceSynced = (await lines(plainLog)).filter((l) => l.outerBytesSent !== undefined);
  expect(synced.map((l) => l.outerBytesSent)).toEqual(referenceSynced.map((l) => l.outerBytesSent));
}, 120_000);

it('diloco: a member frozen (SIGSTOP) in the first epoch, while the others wait for its state digest, is dropped after --member-timeout; the others train; woken, it joins again; all exit 0', async () => {
  const { coordinator, url } = await startCoordinator(2, 3, 30, ['--member-timeout', '3']);
  const log = join(out, 'diloco-digest-frozen.jsonl');
  const follow = followLog(log);
  const member = (env: Record<string, string> = {}) =>
    cli([...RUN, '--transport', 'tcp', '--elastic', url, '--log-jsonl', log], env);
  // The second member freezes itself at its second fault point (the first is the set-up's),
  // before it offers its digests.
  const { lead, frozen, third, ends, droppedAfter } = await freezeSecondMember(
    member,
    coordinator,
    follow,
    '2',
  );
  follow.stop();
  expect(coordinator.stdout()).toMatch(/left \[1\]/);
  for (const end of ends.slice(0, 3)) expect([end.code, end.stderr]).toEqual([0, '']);
  expect(ends[3]!.code).toBe(0);
  const records = await lines(log);
  const changes = records.filter((line) => line.event === 'membership');
  expect(
    changes.map((line) => [line.step, line.worldSize, line.left!.length, line.joined!.length]),
  ).toEqual([
    // The log's first world is the first that shared its state and trained: the world of 3
    // never finished its share, and the frozen member was dropped before any step.
    [0, 2, 1, 0],
    [changes[1]!.step, 3, 0, 1],
  ]);
  expect(changes[1]!.step).toBeGreaterThan(0);
  const steps = records.filter((line) => line.event === undefined);
  expect(steps.map((line) => line.step)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
  // The woken member holds the world's global copy at the end, bit for bit.
  const end = digests(lead).get(STEPS);
  expect(end).toMatch(/^[0-9a-f]{8}$/);
  expect(digests(third).get(STEPS)).toBe(end);
  expect(digests(frozen).get(STEPS)).toBe(end);
  // The world of 2 built its model from the seed too: the share that ran again sent no global copy.
  expect(lead.stdout()).toContain(
    "elastic: every member held rank 0's outer.global already (digests alike): not sent",
  );
  console.log(
    `diloco: a member frozen in the digest exchange dropped ${droppedAfter.toFixed(1)} s after SIGSTOP (--member-timeout 3)`,
  );
  expect(droppedAfter).toBeLessThan(30);
}, 150_000);
