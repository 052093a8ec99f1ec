import type { CommProgress, TrainConfig } from '../config.js';
import { UsageError } from '../errors.js';

/**
 * [Note: where a rank's communication progresses]
 * `--comm-progress worker` starts each process rank's group with `initProcessGroup({ progress:
 * 'worker' })`: its tcp or ws transport, the rendezvous and the link shaper (`WEBSHARD_LINK`) run
 * on a communication worker beside the rank, so an op issued before a kernel moves its bytes
 * while the kernel holds the rank's thread ([Note: the communication worker handshake] in
 * collectives). That is what a streamed DiLoCo sync needs: on the rank's thread (`thread`), a
 * fragment's average moves one hop per inner step (the one turn of the event loop a step gives
 * it), about six hops of 40 ms on broadband-20 at 20 ms a step; on the worker it moves while the
 * steps compute, and the rank's thread only issues each of its calls (int8: the shard exchange,
 * then the all-gather; topk: one all-gather). The default is `worker` for a streamed diloco run
 * (`--outer-fragments` or `--outer-overlap`) of process ranks (`--transport tcp` or `ws`), where
 * the trainer README measures it, and `thread` everywhere else: a hand-off costs each op some
 * tens of microseconds, which only pays when the rank computes while its ops are in flight.
 * Ranks that are threads (`--transport shm`, or webshard-run's default threads on one node) hand
 * their end of the shm rings to the worker instead (`launchThreads({ progress })`, collectives'
 * shm worker path); `--transport local` (every rank on one thread) has none, so `worker` is
 * refused there, as for a thread rank of a job of several nodes (at join).
 */

/** The flag of [Note: where a rank's communication progresses]. */
export const PROGRESS_OPTIONS = {
  'comm-progress': { type: 'string' },
} as const;

const MODES: readonly CommProgress[] = ['thread', 'worker'];

/** `--comm-progress` as given, checked against the rest of `config` (absent: the default at join). */
export function progressOptions(
  v: Record<string, string | boolean | undefined>,
  config: TrainConfig,
): Pick<TrainConfig, 'commProgress'> {
  const given = v['comm-progress'] as string | undefined;
  if (given === undefined) return {};
  if (!MODES.includes(given as CommProgress)) {
    throw new UsageError(`--comm-progress must be thread or worker, got ${given}`, {
      option: '--comm-progress',
    });
  }
  if (given === 'worker' && config.transport === 'local') {
    throw new UsageError(
      `--comm-progress worker runs each rank's tcp, ws or shm transport on a worker thread; --transport ${config.transport} has none`,
      { option: '--comm-progress' },
    );
  }
  if (given === 'worker' && (config.elastic ?? null) !== null) {
    throw new UsageError(
      "--comm-progress worker is not available with --elastic: an elastic world builds its group anew at each change, on the rank's thread",
      { option: '--comm-progress' },
    );
  }
  return { commProgress: given as CommProgress };
}

/**
 * Where a process rank's communication progresses without `--comm-progress`: `worker` for a
 * streamed diloco run that is not elastic and has no browser tabs, else `thread` ([Note: where a
 * rank's communication progresses]).
 */
export function defaultCommProgress(config: TrainConfig): CommProgress {
  const streamed = config.outerFragments > 1 || config.outerOverlap > 0;
  const elastic = (config.elastic ?? null) !== null;
  return config.strategy === 'diloco' && streamed && !elastic && config.browserRanks === 0
    ? 'worker'
    : 'thread';
}
