import { ElasticError } from './errors.js';

/**
 * The wait of a world below `minWorldSize` ([Note: elastic membership]): started once, it calls
 * `expire` with how long it waited after `timeoutMs`, unless stopped first (enough members came).
 */
export class BelowMinimumWait {
  private waiting: { timer: ReturnType<typeof setTimeout>; since: number } | null = null;

  constructor(private readonly timeoutMs: number) {}

  /** Starts the wait unless it runs already. */
  start(expire: (waitedMs: number) => void): void {
    if (this.waiting !== null) return;
    const since = Date.now();
    const timer = setTimeout(() => expire(Date.now() - since), this.timeoutMs);
    this.waiting = { timer, since };
  }

  stop(): void {
    if (this.waiting === null) return;
    clearTimeout(this.waiting.timer);
    this.waiting = null;
  }
}

/** Every member of `epoch` left: waiting newcomers cannot get the job's state. */
export function stateLostError(epoch: number | undefined, waiting: number): ElasticError {
  return new ElasticError(
    'coordinator',
    `every member of epoch ${epoch} left: the job's state is lost, so the ${waiting} waiting member(s) cannot be admitted (restart the job, from a checkpoint)`,
    { code: 'E_STATE_LOST' },
  );
}
