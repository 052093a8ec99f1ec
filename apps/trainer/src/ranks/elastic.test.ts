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
  startCoordinator,
  until,
} from '../test-support/cli-process.js';

// [Note: elastic training in the trainer], end to end over tcp and ws: a coordinator and 3 member
// processes started with the same command; one kills itself (SIGKILL) after its 3rd step, the
// others go on as 2, a 4th process started with the same command joins, and the 3 finish. The
// loss matches one process trained on the same global batches, which is what DDP at any world
// size computes (up to the order of the sums).
const STEPS = 40;
const MODEL = ['--n-layer', '1', '--n-embd', '32', '--n-head', '2', '--block-size', '16'];
const COMMON = [...MODEL, '--batch-size', '12', '--steps', String(STEPS), '--backend', 'cpu'];
const RUN = [...COMMON, '--sample-length', '0', '--seed', '7'];

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'webshard-elastic-'));
});
afterAll(async () => {
  killStarted();
  await rm(out, { recursive: true, force: true });
});

it.each(['tcp', 'ws'])(
  'trains through 3 -> 2 -> 3 members over %s, exit 0, the loss of one uninterrupted process',
  async (transport) => {
    const { coordinator, url } = await startCoordinator(2, 3, 30);
    const log = join(out, `elastic-${transport}.jsonl`);
    let lastLines: Line[] = [];
    const reader = setInterval(() => {
      // A line being written does not parse yet: the next read has it whole.
      lines(log).then(
        (read) => {
          lastLines = read;
        },
        () => {},
      );
    }, 50);
    const member = (env: Record<string, string> = {}) =>
      cli(
        [
          ...RUN,
          '--strategy',
          'ddp',
          '--transport',
          transport,
          '--elastic',
          url,
          '--log-jsonl',
          log,
        ],
        env,
      );
    // The member that dies kills itself at its 3rd step's end, like `kill -9` (its 4th fault point:
    // the set-up's, then a step's each).
    const first = [member(), member(), member({ WEBSHARD_TRAINER_KILL_AT: '4' })];
    // The survivors go on as 2 for a step at least; then they are frozen (SIGSTOP) while the 4th
    // process starts, so it waits at the coordinator before they finish, however fast they step.
    const survivors = await until('a step of the world of 2', () => {
      const changes = lastLines.filter((line) => line.event === 'membership');
      if (changes.length < 2 || lastLines.at(-1)!.event !== undefined) return null;
      return first.filter((m) => m.child.exitCode === null && m.child.signalCode === null);
    });
    // The CLI runs the trainer in a child process of its own: stop the whole process group.
    for (const m of survivors) process.kill(-m.child.pid!, 'SIGSTOP');
    const joiner = member();
    await until('the 4th waiting', () =>
      /member 3 waits/.test(coordinator.stdout()) ? true : null,
    );
    for (const m of survivors) process.kill(-m.child.pid!, 'SIGCONT');
    const [a, b, victim, c, ended] = await allEnded([...first, joiner, coordinator]);
    clearInterval(reader);
    expect(victim!.signal).toBe('SIGKILL');
    for (const result of [a!, b!, c!]) expect([result.code, result.stderr]).toEqual([0, '']);
    expect(ended!.code).toBe(0);
    expect(coordinator.stdout()).toMatch(/epoch 2, 3 member\(s\) \[\d+, \d+, 3\], joined \[3\]/);

    const records = await lines(log);
    const changes = records.filter((line) => line.event === 'membership');
    expect(changes.map((line) => [line.worldSize, line.left!.length, line.joined!.length])).toEqual(
      [
        [3, 0, 3],
        [2, 1, 0],
        [3, 0, 1],
      ],
    );
    // The world of 2 trained at least one step before the 4th was admitted.
    expect(changes[2]!.step).toBeGreaterThan(changes[1]!.step);
    const steps = records.filter((line) => line.event === undefined);
    expect(steps.map((line) => line.step)).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));

    // One process on the same global batches: the reference, never interrupted.
    const single = cli([...RUN, '--log-jsonl', join(out, `single-${transport}.jsonl`)]);
    expect((await single.done).code).toBe(0);
    const reference = await lines(join(out, `single-${transport}.jsonl`));
    const gaps = steps.map(
      (line, i) => Math.abs(line.loss! - reference[i]!.loss!) / reference[i]!.loss!,
    );
    console.log(
      `elastic 3 -> 2 -> 3 over ${transport} against one process: worst relative loss gap ${Math.max(...gaps).toExponential(2)}`,
    );
    expect(Math.max(...gaps)).toBeLessThan(5e-3);
  },
  90_000,
);

it('stops with the sizes when the world stays below --min-world-size', async () => {
  const { coordinator, url } = await startCoordinator(2, 2, 1);
  const lone = cli([...RUN, '--strategy', 'ddp', '--elastic', url]);
  const [member, ended] = await Promise.all([lone.done, coordinator.done]);
  const sizes =
    'the world has 1 member(s), below the minimum world size 2 (--min-world-size), and no member joined within';
  expect(member.code).toBe(1);
  expect(member.stderr).toMatch(
    /^webshard-train: ElasticWorldTooSmallError: \[elastic\.join\] member 0: /,
  );
  expect(member.stderr).toContain(sizes);
  expect(ended.code).toBe(1);
  expect(ended.stderr).toMatch(
    /^webshard-train: ElasticWorldTooSmallError: \[elastic\.coordinator\] /,
  );
  expect(ended.stderr).toContain(sizes);
}, 30_000);

it('a member stopped by SIGTERM leaves (exit 143) and the others go on', async () => {
  // The default wait (60 s): the world of 1 forms at once, the second joins at a step.
  const { coordinator, url } = await startCoordinator(1, 2, 60);
  const log = join(out, 'sigterm.jsonl');
  const args = [...MODEL, '--batch-size', '12', '--steps', '100000', '--backend', 'cpu'];
  const members = [0, 1].map(() =>
    cli([...args, '--strategy', 'ddp', '--elastic', url, '--log-jsonl', log]),
  );
  let read: Line[] = [];
  const poll = async () => {
    read = await lines(log).catch(() => read);
    return read;
  };
  await until('a few steps of 2', () => {
    void poll();
    return read.filter((line) => line.event === undefined).length >= 3 ? true : null;
  });
  members[1]!.child.kill('SIGTERM');
  const stopped = await members[1]!.done;
  expect(stopped.code).toBe(143);
  await until('a step of the one left', () => {
    void poll();
    const changes = read.filter((line) => line.event === 'membership');
    return changes.length === 2 && read.at(-1)!.event === undefined ? true : null;
  });
  expect(read.filter((line) => line.event === 'membership').map((line) => line.worldSize)).toEqual([
    2, 1,
  ]);
  members[0]!.child.kill('SIGTERM');
  expect((await members[0]!.done).code).toBe(143);
  expect((await coordinator.done).code).toBe(0);
}, 60_000);

// Gated in earlier sessions as flaky (2 failures in about 12 runs). One cause found and fixed:
// rank 0 emptied and remade a step's `.partial` folder while a rank that began first had made it
// and written its shard there (`ENOENT`); the ranks now meet at a barrier in between
// (run/loop.ts `saveCheckpoint`). 24 runs after the fix passed at load 2-8.
it('fsdp restarts from its last sharded checkpoint at the new world size when a member dies', async () => {
  const { coordinator, url } = await startCoordinator(2, 3, 30);
  const log = join(out, 'fsdp.jsonl');
  const checkpoints = join(out, 'fsdp-checkpoints');
  const sharded = ['--checkpoint-dir', checkpoints, '--checkpoint-every', '2'];
  const members = [0, 1, 2].map(() =>
    cli([...RUN, '--strategy', 'fsdp', ...sharded, '--elastic', url, '--log-jsonl', log]),
  );
  let read: Line[] = [];
  await until('a checkpoint, then a step', () => {
    lines(log).then(
      (got) => {
        read = got;
      },
      () => {},
    );
    const steps = read.filter((line) => line.event === undefined).map((line) => line.step);
    return steps.length > 0 && steps.at(-1)! % 2 === 1 && steps.at(-1)! > 2 ? true : null;
  });
  // Frozen where they are (however fast they step), a member that is not rank 0 (rank 0 prints
  // the run's lines) dies like `kill -9`, and the others go on.
  try {
    for (const m of members) process.kill(-m.child.pid!, 'SIGSTOP');
  } catch (error) {
    const gone = await Promise.all(
      members.map((m) => Promise.race([m.done, Promise.resolve(null)])),
    );
    throw new Error(`${(error as Error).message}: ${JSON.stringify(gone)}`);
  }
  const victim = members.find((m) => !/strategy: fsdp/.test(m.stdout()))!;
  process.kill(-victim.child.pid!, 'SIGKILL');
  for (const m of members) if (m !== victim) process.kill(-m.child.pid!, 'SIGCONT');
  const [a, b, ended] = await Promise.all([
    ...members.filter((m) => m !== victim).map((m) => m.done),
    coordinator.done,
  ]);
  for (const result of [a!, b!]) expect([result.code, result.stderr]).toEqual([0, '']);
  expect(ended!.code).toBe(0);
  const records = await lines(log);
  const changes = records.filter((line) => line.event === 'membership');
  expect(changes.map((line) => line.worldSize)).toEqual([3, 2]);
  // Epoch 1 starts at the last checkpoint's step: even (one every 2 steps), past the first.
  expect(changes[1]!.step % 2).toBe(0);
  expect(changes[1]!.step).toBeGreaterThan(0);
  // The steps after that checkpoint ran again at 2 ranks; the last run of each step is the run's.
  const last = new Map<number, number>();
  for (const line of records) if (line.event === undefined) last.set(line.step, line.loss!);
  expect([...last.keys()]).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
  const single = cli([...RUN, '--log-jsonl', join(out, 'fsdp-single.jsonl')]);
  expect((await single.done).code).toBe(0);
  const reference = await lines(join(out, 'fsdp-single.jsonl'));
  const gaps = reference.map((line) => Math.abs(last.get(line.step)! - line.loss!) / line.loss!);
  console.log(
    `elastic fsdp 3 -> 2 against one process: worst relative loss gap ${Math.max(...gaps).toExponential(2)}`,
  );
  expect(Math.max(...gaps)).toBeLessThan(5e-3);
}, 90_000);
