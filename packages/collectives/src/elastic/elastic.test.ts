import { afterEach, describe, expect, it } from 'vitest';
import { ElasticCoordinator } from './coordinator.js';
import {
  atGate,
  forgetMember,
  type Running,
  startMember,
  stopMembers,
  until,
} from './__fixtures__/member-threads.js';
import { type MemberData, type MemberReport, referenceRun } from './__fixtures__/toy-model.js';

// [Note: elastic membership], end to end: members are worker threads (a real thread terminated is
// a member killed: its sockets close), the coordinator runs here. 3 members train, one is killed,
// 2 go on, a new one joins and receives the state from a live member, 3 finish.

let coordinator: ElasticCoordinator | undefined;

afterEach(async () => {
  await stopMembers();
  await coordinator?.close();
  coordinator = undefined;
});

const start = startMember;

const statesAt = (members: Running[], epoch: number) =>
  members.map((r) =>
    r.reports.find((report) => report.kind === 'state' && report.epoch === epoch),
  ) as Extract<MemberReport, { kind: 'state' }>[];
const same = (a: Float32Array, b: Float32Array) =>
  Buffer.compare(Buffer.from(a.buffer), Buffer.from(b.buffer)) === 0;

describe.each(['tcp', 'ws'] as const)('elastic world over %s', (backend) => {
  it('3 members, one killed, 2 go on, one joins with the state bit for bit, 3 finish', async () => {
    coordinator = await ElasticCoordinator.start({
      minWorldSize: 2,
      maxWorldSize: 3,
      syncTimeoutMs: 10_000,
      // The first epoch waits for all 3 (at the maximum it forms at once).
      joinWindowMs: 20_000,
      // Each change as it is announced: no member has trained in it yet (none reported its state).
      onEpoch: (change) =>
        told.push([change.epoch, statesAt(everyone, change.epoch).filter(Boolean).length]),
    });
    const told: [number, number][] = [];
    const everyone: Running[] = [];
    const data: MemberData = { url: coordinator.url, backend, size: 257, steps: 9, lr: 0.5 };
    const first = [start(data), start(data), start(data)];
    everyone.push(...first);
    for (const r of first) r.worker.postMessage({ gate: 3 });
    await until('3 members at step 3', () => first.every((r) => atGate(r, 3)));
    const epoch0 = statesAt(first, 0);
    expect(epoch0.map((s) => s.worldSize)).toEqual([3, 3, 3]);
    expect(epoch0.every((s) => same(s.params, epoch0.find((t) => t.rank === 0)!.params))).toBe(
      true,
    );

    // Kill the member of rank 1: the survivors' step 3 fails, they drop it and redo the step.
    const victim = first.find((r) => statesAt([r], 0)[0]!.rank === 1)!;
    const victimId = statesAt([victim], 0)[0]!.id;
    await victim.worker.terminate();
    forgetMember(victim);
    const survivors = first.filter((r) => r !== victim);
    for (const r of survivors) r.worker.postMessage({ gate: 6 });
    await until('2 survivors at step 6', () => survivors.every((r) => atGate(r, 6)));
    const epoch1 = statesAt(survivors, 1);
    expect(epoch1.map((s) => [s.worldSize, s.left, s.joined])).toEqual([
      [2, [victimId], []],
      [2, [victimId], []],
    ]);
    expect(epoch1.map((s) => s.rank).sort()).toEqual([0, 1]);

    // A newcomer waits at the coordinator and is admitted at the survivors' next sync point.
    const joiner = start(data);
    everyone.push(joiner);
    joiner.worker.postMessage({ gate: 9 });
    await until('the newcomer waiting', () => coordinator!.waiting.length === 1);
    const joinerId = coordinator.waiting[0]!;
    for (const r of survivors) r.worker.postMessage({ gate: 9 });
    const all = [...survivors, joiner];
    await until('3 members done', () => all.every((r) => r.reports.some((x) => x.kind === 'done')));
    const epoch2 = statesAt(all, 2);
    expect(epoch2.map((s) => [s.worldSize, s.left, s.joined, s.step])).toEqual(
      all.map(() => [3, [], [joinerId], 7]),
    );
    expect(epoch2.find((s) => s.id === joinerId)!.rank).toBe(2);
    // The newcomer's parameters are the group's, bit for bit (its own guess was different).
    for (const s of epoch2) expect(same(s.params, epoch2[0]!.params)).toBe(true);

    const done = all.map((r) => r.reports.find((x) => x.kind === 'done')!) as Extract<
      MemberReport,
      { kind: 'done' }
    >[];
    expect(done.map((d) => [d.step, d.epoch])).toEqual(all.map(() => [9, 2]));
    for (const d of done) expect(same(d.params, done[0]!.params)).toBe(true);
    // Within rounding of one uninterrupted process (the sums' order differs by world size).
    const reference = referenceRun(data);
    const worst = Math.max(...done[0]!.params.map((p, j) => Math.abs(p - reference[j]!)));
    expect(worst).toBeLessThan(1e-5);
    expect(coordinator.history.map((h) => h.members.length)).toEqual([3, 2, 3]);
    expect(told).toEqual([
      [0, 0],
      [1, 0],
      [2, 0],
    ]);
    expect(await Promise.all(all.map((r) => r.exited))).toEqual([0, 0, 0]);
  }, 30_000);
});
