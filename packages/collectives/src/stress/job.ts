import type { ProgressMode } from '../init-process-group.js';
import type { ProgramOptions } from './program.js';
import type { RankOptions } from './run-rank.js';

/** The transports a stress run covers. */
export const STRESS_TRANSPORTS = ['shm', 'two-level', 'tcp', 'ws', 'local'] as const;
export type StressTransport = (typeof STRESS_TRANSPORTS)[number];

/** One world running one program: what the parent hands each rank (as JSON). */
export interface StressJob {
  readonly transport: StressTransport;
  readonly worldSize: number;
  readonly seed: number;
  readonly program: ProgramOptions;
  readonly rank: RankOptions;
  /** shm and two-level: bytes of each rank's arena slot (small ones make small ops take rounds). */
  readonly slotBytes: number;
  /** tcp and ws: every rank in this thread over real sockets, instead of a process each. */
  readonly inProcess: boolean;
  /** tcp and ws: each rank's communication on its own thread or on a worker. */
  readonly progress: ProgressMode;
}

/** The line prefix of a rank's report on stdout. */
export const REPORT_MARK = '@@stress ';
/** The variable that carries the job to a rank started by the launcher. */
export const JOB_VARIABLE = 'WEBSHARD_STRESS_JOB';
