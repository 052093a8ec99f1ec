// The elastic tests' members as worker threads (elastic.test.ts, liveness.test.ts): each runs
// ./elastic-member.ts, reports to the test, and is terminated by `stopMembers` after each test.
import { Worker } from 'node:worker_threads';
import { tsxBootstrap } from '../../test-support/shm/shm-suite-run.js';
import type { MemberData, MemberReport } from './toy-model.js';

const member = tsxBootstrap('../../elastic/__fixtures__/elastic-member.ts');

/** A member thread: what it reported so far, and its exit code once it ends. */
export interface Running {
  worker: Worker;
  reports: MemberReport[];
  exited: Promise<number>;
}

const running: Running[] = [];

/** Starts a member thread with `data`. */
export function startMember(data: MemberData): Running {
  const worker = new Worker(member, {
    eval: true,
    execArgv: ['--conditions=@webshard/source'],
    workerData: data,
  });
  const reports: MemberReport[] = [];
  worker.on('message', (report: MemberReport) => reports.push(report));
  const exited = new Promise<number>((resolve) => worker.once('exit', resolve));
  worker.on('error', (error) => reports.push({ kind: 'gate', id: -1, step: -1, error } as never));
  const entry = { worker, reports, exited };
  running.push(entry);
  return entry;
}

/** Terminates every member thread started and not yet stopped (an `afterEach`). */
export async function stopMembers(): Promise<void> {
  await Promise.all(running.splice(0).map((r) => r.worker.terminate()));
}

/** Forgets `entry` (a test terminated it itself, as a member killed). */
export function forgetMember(entry: Running): void {
  running.splice(running.indexOf(entry), 1);
}

/** Polls `ready` every 20 ms; throws after `timeoutMs`. */
export async function until(what: string, ready: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Whether `r` reported waiting at the gate of `step`. */
export const atGate = (r: Running, step: number) =>
  r.reports.some((report) => report.kind === 'gate' && report.step === step);
