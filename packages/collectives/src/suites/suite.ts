import type { ProcessGroup } from '../process-group.js';
import { runCases } from './suite-cases.js';
import { runFailure } from './suite-failures.js';

// The cases and failure scenarios live in suite-cases.ts and suite-failures.ts; these constants
// kept their old module path (the `./testing` entry and tests import them from here).
export { FAILURE_TIMEOUT_MS, STALL_LIMIT_MS } from './suite-failures.js';

/**
 * [Note: one suite for every transport]
 * The suite is a set of jobs that EACH RANK runs on its own `ProcessGroup` (`runSuiteJob`), wherever
 * that rank lives: the same thread (local), a worker thread (shm) or another process (tcp, ws). A
 * job checks its own results against a reference it computes itself (every rank can generate every
 * rank's input from the seed) and returns a plain, structured-cloneable `RankReport`; the test
 * runner (`runTransportSuite`) only compares the reports across ranks. So a transport plugs in by
 * saying how to start `size` ranks and run a job on each.
 */

/** The settings the suite's groups should be created with (small, to exercise the ring paths). */
export const SUITE_GROUP_OPTIONS = {
  timeoutMs: 10_000,
  segmentBytes: 1024,
  smallMessageBytes: 256,
} as const;

/** The failure scenarios; each needs a fresh set of groups. */
export const FAILURE_SCENARIOS = [
  'mismatch-op',
  'mismatch-dtype',
  'mismatch-count',
  'mismatch-reduce-op',
  'mismatch-root',
  'stall',
  'barrier-timeout',
  'kill',
  'kill-mid-ring',
  'kill-rank-0',
] as const;
export type FailureScenario = (typeof FAILURE_SCENARIOS)[number];

/**
 * Whether a job makes a rank die (`SuiteEnvironment.die`): network transports run those with
 * ranks as child processes, which can really die.
 */
export function killsARank(job: SuiteJob): boolean {
  return job.kind === 'failure' && job.scenario.startsWith('kill');
}

/** What the runner asks a rank to do. */
export type SuiteJob =
  | { kind: 'cases'; seed: number }
  | { kind: 'failure'; scenario: FailureScenario };

/** An error as plain data. */
export interface ErrorReport {
  name: string;
  message: string;
  op?: string;
  seq?: number;
  rank?: number;
  peer?: number;
  waitingFor?: number[];
}

/** One case's outcome on one rank. */
export interface CaseReport {
  name: string;
  /** Null when the rank's result matched the reference; else what differed. */
  failure: string | null;
  /** FNV-1a of the result bytes, to compare across ranks (bit-identical results). */
  digest: number;
}

/** A rank's answer to a job. */
export interface RankReport {
  rank: number;
  cases: CaseReport[];
  /** Failure scenarios: the error of the op that failed, and of a call made after it. */
  error?: ErrorReport | null;
  afterError?: ErrorReport | null;
  /** Failure scenarios: milliseconds from issuing the op that failed to its error. */
  elapsedMs?: number;
}

/** Whatever each rank needs from its environment. */
export interface SuiteEnvironment {
  /** Make this rank die now, as a crash would (local: the hub kills it; shm: the worker exits). */
  die(): void;
}

/** Run one suite job on this rank's group (the world group of its transport). */
export async function runSuiteJob(
  group: ProcessGroup,
  job: SuiteJob,
  environment: SuiteEnvironment,
): Promise<RankReport> {
  if (job.kind === 'cases') return { rank: group.rank, cases: await runCases(group, job.seed) };
  return runFailure(group, job.scenario, environment);
}
