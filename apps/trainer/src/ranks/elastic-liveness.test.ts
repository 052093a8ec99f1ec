import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  allEnded,
  cli,
  followLog,
  killStarted,
  type Line,
  lines,
  type Started,
  signalAll,
  startCoordinator,
  until,
} from '../test-support/cli-process.js';
import { freezeSecondMember } from '../test-support/frozen-member.js';

// [Note: liveness in an elastic world] (collectives) with real processes: a member frozen with
// SIGSTOP (a closed lid) is dropped after --member-timeout and the others finish; woken after, it
// joins again as a newcomer with the world's state; a slow member is kept; the coordinator killed
// and started again on its port changes nothing; gone for good, every member exits in one line.
const MODEL = ['--n-layer', '1', '--n-embd', '32', '--n-head', '2', '--block-size', '16'];
const RUN = [
  ...MODEL,
  '--batch-size',
  '12',
  '--backend',
  'cpu',
  '--sample-length',
  '0',
  '--seed',
  '7',
];
const TIMEOUT = ['--member-timeout', '3'];

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'webshard-liveness-'));
});
afterAll(async () => {
  killStarted();
  await rm(out, { recursive: true, force: true });
});

const steps = (read: Line[]) => read.filter((line) => line.event === undefined);
const changes = (read: Line[]) => read.filter((line) => line.event === 'membership');
const alive = (m: Started) => m.child.exitCode === null && m.child.signalCode === null;

const STRATEGIES: Record<string, { args: string[]; transport: string; steps: number }> = {
  ddp: { args: ['--strategy', 'ddp'], transport: 'tcp', steps: 60 },
  fsdp: {
    args: ['--strategy', 'fsdp', '--checkpoint-every', '2'],
    transport: 'tcp',
    steps: 40,
  },
  diloco: {
    args: ['--strategy', 'diloco', '--inner-steps', '4', '--outer-compression', 'int8'],
    transport: 'ws',
    steps: 60,
  },
};

it.each(Object.keys(STRATEGIES))(
  '%s: a member frozen (SIGSTOP) is dropped after --member-timeout, the others go on; woken, it joins again; all exit 0',
  async (strategy) => {
    const { args, transport, steps: total } = STRATEGIES[strategy]!;
    const { coordinator, url } = await startCoordinator(2, 3, 30, TIMEOUT);
    const log = join(out, `frozen-${strategy}.jsonl`);
    const follow = followLog(log);
    const extra = strategy === 'fsdp' ? ['--checkpoint-dir', join(out, `ckpt-${strategy}`)] : [];
    const member = () =>
      cli([
        ...RUN,
        ...args,
        ...extra,
        ...['--steps', String(total), '--transport', transport, '--elastic', url],
        ...['--log-jsonl', log],
      ]);
    const all = [member(), member(), member()];
    await until('3 steps of 3', () => (steps(follow.latest()).length >= 3 ? true : null), 60_000);
    // Rank 0 prints the run's lines: freeze another one.
    const frozen = all.find((m) => !/strategy: /.test(m.stdout()))!;
    process.kill(-frozen.child.pid!, 'SIGSTOP');
    const frozenAt = Date.now();
    const others = all.filter((m) => m !== frozen);
    await until(
      'a step of the world of 2',
      () => {
        const read = follow.latest();
        return changes(read).length === 2 && read.at(-1)!.event === undefined ? true : null;
      },
      60_000,
    );
    const droppedAfter = (Date.now() - frozenAt) / 1000;
    expect(changes(follow.latest())[1]!.worldSize).toBe(2);
    expect(coordinator.stdout()).toMatch(/left \[\d+\]/);
    // Woken once the world went on without it: it learns it was dropped and joins again.
    signalAll(others, 'SIGSTOP');
    process.kill(-frozen.child.pid!, 'SIGCONT');
    await until('the woken member waiting', () =>
      /member 3 waits/.test(coordinator.stdout()) ? true : null,
    );
    signalAll(others, 'SIGCONT');
    const results = await allEnded([...all, coordinator]);
    follow.stop();
    for (const result of results.slice(0, 3)) expect([result.code, result.stderr]).toEqual([0, '']);
    expect(results[3]!.code).toBe(0);
    const read = await lines(log);
    expect(changes(read).map((line) => [line.worldSize, line.left!.length, line.joined])).toEqual([
      [3, 0, [0, 1, 2]],
      [2, 1, []],
      [3, 0, [3]],
    ]);
    const last = new Map<number, number>();
    for (const line of steps(read)) last.set(line.step, line.loss!);
    expect([...last.keys()].sort((a, b) => a - b)).toEqual(
      Array.from({ length: total }, (_, i) => i + 1),
    );
    console.log(
      `${strategy} over ${transport}: a frozen member dropped ${droppedAfter.toFixed(1)} s after SIGSTOP (--member-timeout 3)`,
    );
    // Dropped after the member timeout and a beat, long before the sync timeout (300 s).
    expect(droppedAfter).toBeLessThan(30);
  },
  150_000,
);

it("ddp: a member frozen (SIGSTOP) in its set-up, while the others wait in the set-up's collectives, is dropped after --member-timeout; the others train as 2; woken, it joins again; all exit 0", async () => {
  const total = 30;
  const { coordinator, url } = await startCoordinator(2, 3, 30, TIMEOUT);
  const log = join(out, 'setup-frozen.jsonl');
  const follow = followLog(log);
  const member = (env: Record<string, string> = {}) =>
    cli(
      [
        ...RUN,
        ...['--strategy', 'ddp', '--steps', String(total), '--transport', 'tcp'],
        ...['--elastic', url, '--log-jsonl', log],
      ],
      env,
    );
  // The second member freezes itself at its first fault point, before its set-up asks the world
  // about the matmul's FMA; woken after the others train as 2, its set-up fails in the old world
  // and it joins again, set up anew.
  const { ends, droppedAfter } = await freezeSecondMember(member, coordinator, follow, '1');
  follow.stop();
  expect(coordinator.stdout()).toMatch(/left \[1\]/);
  for (const end of ends.slice(0, 3)) expect([end.code, end.stderr]).toEqual([0, '']);
  expect(ends[3]!.code).toBe(0);
  const read = await lines(log);
  // The log's first world is the first that set up and shared its state: the world of 3 never
  // finished its set-up.
  expect(changes(read).map((line) => [line.step, line.worldSize, line.left!.length])).toEqual([
    [0, 2, 1],
    [changes(read)[1]!.step, 3, 0],
  ]);
  expect(changes(read)[1]!.step).toBeGreaterThan(0);
  expect(steps(read).map((line) => line.step)).toEqual(
    Array.from({ length: total }, (_, i) => i + 1),
  );
  console.log(
    `ddp: a member frozen in its set-up dropped ${droppedAfter.toFixed(1)} s after SIGSTOP (--member-timeout 3)`,
  );
  expect(droppedAfter).toBeLessThan(30);
}, 150_000);

it('a slow member (each step blocks its thread 1.5 s, the others 0.05 s) is not dropped at --member-timeout 2', async () => {
  const { coordinator, url } = await startCoordinator(2, 2, 30, ['--member-timeout', '2']);
  const log = join(out, 'slow.jsonl');
  const member = (env: Record<string, string> = {}) =>
    cli([...RUN, '--strategy', 'ddp', '--steps', '6', '--elastic', url, '--log-jsonl', log], env);
  const both = [member(), member({ WEBSHARD_TRAINER_SLOW_MS: '1500' })];
  const results = await allEnded([...both, coordinator]);
  for (const result of results) expect([result.code, result.stderr]).toEqual([0, '']);
  expect(changes(await lines(log)).map((line) => line.worldSize)).toEqual([2]);
}, 90_000);

it('diloco: a member later than --sync-timeout to an outer sync is left out of it, joins again, all exit 0', async () => {
  const { coordinator, url } = await startCoordinator(2, 3, 30, [
    ...['--member-timeout', '20', '--sync-timeout', '2'],
  ]);
  const log = join(out, 'straggler.jsonl');
  const run = [...RUN, ...STRATEGIES.diloco!.args, '--steps', '160', '--log-jsonl', log];
  const member = (env: Record<string, string>) =>
    cli([...run, '--transport', 'tcp', '--elastic', url], env);
  // Its first 4 steps block 1.5 s each: 6 s late to the first outer sync (step 4). The others'
  // steps take 60 ms at least, so the job is still on when it comes back.
  const late = { WEBSHARD_TRAINER_SLOW_MS: '1500', WEBSHARD_TRAINER_SLOW_STEPS: '4' };
  const steady = { WEBSHARD_TRAINER_SLOW_MS: '60' };
  // The late member joins first: rank 0, the one that writes the log, until it is dropped while
  // it still trains (the new rank 0 appends to the same file: every line must stay whole).
  const first = member(late);
  await until('the late member waiting', () =>
    /member 0 waits/.test(coordinator.stdout()) ? true : null,
  );
  const all = [first, member(steady), member(steady)];
  const results = await allEnded([...all, coordinator]);
  for (const result of results) expect([result.code, result.stderr]).toEqual([0, '']);
  const read = await lines(log);
  const moves = changes(read).map((line) => [
    line.step,
    line.worldSize,
    line.left!.length,
    line.joined!.length,
  ]);
  // The first outer sync went on as 2; the latecomer was admitted at a later one, as a newcomer.
  expect(moves.slice(0, 2)).toEqual([
    [0, 3, 0, 3],
    [4, 2, 1, 0],
  ]);
  expect(moves[2]!.slice(1)).toEqual([3, 0, 1]);
  expect(moves[2]![0]! % 4).toBe(0);
  expect(coordinator.stdout()).toMatch(/left \[\d+\]/);
}, 120_000);

/** A port free now, for a coordinator that must come back on the same one. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function coordinatorOn(port: number, extra: string[]): Started {
  return cli([
    ...['--elastic-coordinator', String(port), '--min-world-size', '2', '--max-world-size', '3'],
    ...['--elastic-wait-seconds', '30', ...TIMEOUT, ...extra],
  ]);
}

it('the coordinator SIGKILLed and started again on its port: the members train through, all exit 0, the loss of one process', async () => {
  const port = await freePort();
  const state = ['--coordinator-state', join(out, 'world.json')];
  const first = coordinatorOn(port, state);
  const url = await until(
    'the coordinator',
    () => /--elastic (ws:\/\/\S+)/.exec(first.stdout())?.[1],
  );
  const log = join(out, 'restart.jsonl');
  const follow = followLog(log);
  // Enough steps that the world is still training when the coordinator is back.
  const STEPS = 300;
  const run = [...RUN, '--strategy', 'ddp', '--steps', String(STEPS), '--log-jsonl', log];
  const members = [0, 1, 2].map(() => cli([...run, '--elastic', url]));
  await until('3 steps of 3', () => (steps(follow.latest()).length >= 3 ? true : null), 60_000);
  process.kill(-first.child.pid!, 'SIGKILL');
  const at = steps(follow.latest()).length;
  // The world trains on without a coordinator.
  await until('3 more steps', () => (steps(follow.latest()).length >= at + 3 ? true : null));
  const again = coordinatorOn(port, state);
  const results = await allEnded([...members, again]);
  follow.stop();
  for (const result of results) expect([result.code, result.stderr]).toEqual([0, '']);
  expect(again.stdout()).toMatch(/elastic: epoch 0 \[0, 1, 2\] taken back from .*world\.json/);
  expect(again.stdout()).toMatch(/every member left; the job is over/);
  const read = await lines(log);
  // Nobody left or joined: the world of 3 trained through. Under load a step can still fail
  // while the coordinator is away (seen 2 times in some 30 runs at load 8-16, the cause not
  // found): the 3 members then rebuild their group, each printing why ("elastic: step N failed,
  // the world regroups: ..."), and run the step again. Should the world change otherwise: what
  // changed, and what the coordinators and the members said (but their step lines).
  const said = [first, again, ...members]
    .map((c) =>
      c
        .stdout()
        .split('\n')
        .filter((l) => !/^step /.test(l))
        .join('\n'),
    )
    .join('---\n');
  const worlds = changes(read);
  expect(
    worlds.map((line) => [line.worldSize, line.left, line.joined]),
    `${JSON.stringify(worlds)}\n${said}`,
  ).toEqual(worlds.map((_, i) => [3, [], i === 0 ? [0, 1, 2] : []]));
  if (worlds.length > 1)
    console.log(`the coordinator restart: ${worlds.length - 1} rebuild(s)\n${said}`);
  expect(steps(read).map((line) => line.step)).toEqual(
    Array.from({ length: STEPS }, (_, i) => i + 1),
  );
  const single = cli([...RUN, '--steps', String(STEPS), '--log-jsonl', join(out, 'single.jsonl')]);
  expect((await single.done).code).toBe(0);
  const reference = await lines(join(out, 'single.jsonl'));
  const gaps = steps(read).map(
    (line, i) => Math.abs(line.loss! - reference[i]!.loss!) / reference[i]!.loss!,
  );
  expect(Math.max(...gaps)).toBeLessThan(5e-3);
  // 22 s alone on a quiet machine (the whole file: 116 s); in a fresh-clone CI run at load 7 it
  // ran past 120 s once, whether slow or stuck was not seen. The bound is for a hang, not a speed.
}, 300_000);

it('the coordinator gone for good: every member exits 1 in one line within --coordinator-timeout', async () => {
  const { coordinator, url } = await startCoordinator(2, 2, 30, TIMEOUT);
  const log = join(out, 'gone.jsonl');
  const follow = followLog(log);
  const run = [...RUN, '--strategy', 'ddp', '--steps', '100000', '--log-jsonl', log];
  const members = [0, 1].map(() => cli([...run, '--elastic', url, '--coordinator-timeout', '4']));
  await until('3 steps of 2', () => (steps(follow.latest()).length >= 3 ? true : null), 60_000);
  process.kill(-coordinator.child.pid!, 'SIGKILL');
  const gone = Date.now();
  const results = await allEnded(members);
  follow.stop();
  const seconds = (Date.now() - gone) / 1000;
  for (const result of results) {
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      new RegExp(
        `^webshard-train: ElasticError: \\[elastic\\.sync\\] member \\d: no coordinator at ${url} for 4 s \\(coordinatorTimeoutMs; [^\\n]*\\n$`,
      ),
    );
  }
  expect(seconds).toBeLessThan(15);
  expect(alive(members[0]!)).toBe(false);
}, 90_000);
