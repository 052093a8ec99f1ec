import { BelowMinimumWait, stateLostError } from './below-minimum.js';
import type { ResolvedCoordinatorOptions } from './coordinator-options.js';
import { type CoordinatorState, CoordinatorStateFile } from './coordinator-state-file.js';
import { EpochStores } from './epoch-stores.js';
import { ElasticError, ElasticWorldTooSmallError } from './errors.js';
import { nextMembers } from './membership.js';
import type { CoordinatorMessage, EpochAnnouncement } from './protocol.js';
import type { Member, Roster } from './roster.js';

/**
 * The coordinator's epochs ([Note: elastic membership] in coordinator.ts): after every event it
 * looks whether a sync point is complete and forms the next epoch (a fresh store, the state file
 * written, every member answered), waits below the minimum and fails the job, keeps the sync
 * point's deadline and the join window, and settles `done`. The coordinator feeds it the events
 * its members' connections bring (`advance`), and the members it drops.
 */
export class EpochFormer {
  private syncTimer: ReturnType<typeof setTimeout> | null = null;
  private windowTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly belowMin: BelowMinimumWait;
  private forming = false;
  private closed = false;
  private resolveDone!: () => void;
  private rejectDone!: (error: ElasticError) => void;
  private readonly stores: EpochStores;
  private readonly stateFile: CoordinatorStateFile | null;
  /** Why the job failed, once it did: later joins are refused with it. */
  failure: ElasticError | null = null;
  /** Every announced change of membership, in order. */
  readonly history: EpochAnnouncement[] = [];
  /** See `ElasticCoordinator.done`. */
  readonly done: Promise<void>;

  constructor(
    private readonly roster: Roster,
    private readonly options: ResolvedCoordinatorOptions,
    private readonly send: (member: Member, message: CoordinatorMessage) => void,
  ) {
    this.done = new Promise<void>((resolve, reject) => {
      this.resolveDone = resolve;
      this.rejectDone = reject;
    });
    this.done.catch(() => {});
    this.stores = new EpochStores(options.host, options.token, options.tls);
    this.belowMin = new BelowMinimumWait(options.belowMinTimeoutMs);
    this.stateFile =
      options.statePath === null ? null : new CoordinatorStateFile(options.statePath);
  }

  /**
   * A member of the current epoch reached its sync point: the point's deadline starts with the
   * first; members not there by then are handed to `latecomers`.
   */
  startSyncDeadline(latecomers: () => void): void {
    if (this.syncTimer !== null) return;
    this.syncTimer = setTimeout(() => {
      this.syncTimer = null;
      latecomers();
    }, this.options.syncTimeoutMs);
  }

  /** The coordinator closes: no epoch forms after this; the stores stop; `done` settles. */
  async close(): Promise<void> {
    this.closed = true;
    this.clearTimers();
    await this.stores.close();
    this.resolveDone();
  }

  /** The state file's contents for `world` (default the current one). */
  private stateOf(world = this.roster.current!): CoordinatorState {
    const { minWorldSize, maxWorldSize } = this.options;
    const { epoch, members } = world;
    return { version: 1, epoch, members, nextId: this.roster.nextId, minWorldSize, maxWorldSize };
  }

  /** Queues a write of the state file (a new id given): the epoch itself is written by `form`. */
  persist(): void {
    if (this.stateFile !== null && this.roster.current !== null)
      this.stateFile.save(this.stateOf());
  }

  private clearTimers(): void {
    if (this.syncTimer !== null) clearTimeout(this.syncTimer);
    if (this.windowTimer !== null) clearTimeout(this.windowTimer);
    this.belowMin.stop();
    this.syncTimer = this.windowTimer = null;
  }

  /** The answer to a sync point that changed nothing. */
  sameEpoch(): EpochAnnouncement {
    const { epoch, members } = this.roster.current!;
    const storeUrl = this.history.at(-1)?.storeUrl ?? '';
    return { op: 'epoch', epoch, members, left: [], joined: [], changed: false, storeUrl };
  }

  /** The job is over: its state file goes, then `done` settles. */
  private end(): void {
    void (this.stateFile?.remove() ?? Promise.resolve()).then(() => this.resolveDone());
  }

  /** Re-examines the world after any event: forms the next epoch when a sync point is complete. */
  advance(): void {
    if (this.closed || this.forming || this.failure !== null) return;
    const waiting = [...this.roster.members.values()]
      .filter(
        (member) =>
          member.syncedAt === -1 && !(this.roster.current?.members.includes(member.id) ?? false),
      )
      .map((member) => member.id);
    const { minWorldSize, maxWorldSize } = this.options;
    if (this.roster.current === null) {
      if (waiting.length < minWorldSize) {
        this.waitBelowMin(waiting.length);
        return;
      }
      this.belowMin.stop();
      if (waiting.length < maxWorldSize && this.options.joinWindowMs > 0) {
        this.windowTimer ??= setTimeout(() => {
          this.windowTimer = null;
          this.form(nextMembers([], new Set(), this.roster.waitingIds(), this.options), false);
        }, this.options.joinWindowMs);
        return;
      }
      this.form(nextMembers([], new Set(), waiting, this.options), false);
      return;
    }
    const { epoch, members } = this.roster.current;
    const live = members.filter((id) => this.roster.members.has(id));
    if (!live.every((id) => this.roster.members.get(id)!.syncedAt === epoch)) return;
    if (live.length === 0) {
      if (this.roster.forgetUnclaimed()) {
        // A restored world nobody resumed: its job ended while the coordinator was away, or it
        // was an earlier job's. Newcomers waiting form a new one; with none, the job is over.
        if (waiting.length > 0) this.advance();
        else {
          this.end();
        }
        return;
      }
      // Everyone left (the job ended, or every process died): newcomers cannot get the state.
      if (waiting.length > 0) this.fail(stateLostError(this.roster.current?.epoch, waiting.length));
      else {
        this.end();
      }
      return;
    }
    const next = nextMembers(members, new Set(live), waiting, this.options);
    if (next.members.length < minWorldSize) {
      this.waitBelowMin(next.members.length);
      return;
    }
    this.belowMin.stop();
    const rebuild = live.some((id) => this.roster.members.get(id)!.rebuild);
    this.form(next, next.left.length > 0 || next.joined.length > 0 || rebuild);
  }

  private waitBelowMin(worldSize: number): void {
    // Nobody is waiting at all before the first epoch: nothing to time out yet.
    if (this.roster.current === null && worldSize === 0) return;
    this.belowMin.start((waitedMs) => {
      const live = (this.roster.current?.members ?? []).filter((id) => this.roster.members.has(id));
      const size = live.length + this.roster.waitingIds().length;
      this.fail(
        new ElasticWorldTooSmallError('coordinator', {
          worldSize: Math.min(this.options.maxWorldSize, size),
          minWorldSize: this.options.minWorldSize,
          waitedMs,
        }),
      );
    });
  }

  fail(error: ElasticError): void {
    this.failure = error;
    this.clearTimers();
    void this.stateFile?.remove();
    const fields =
      error instanceof ElasticWorldTooSmallError
        ? { worldSize: error.worldSize, minWorldSize: error.minWorldSize, waitedMs: error.waitedMs }
        : { worldSize: 0, minWorldSize: this.options.minWorldSize, waitedMs: 0 };
    const message: CoordinatorMessage = {
      op: 'failed',
      code: error.code,
      message: error.message,
      ...fields,
    };
    for (const member of this.roster.members.values()) {
      this.send(member, message);
      member.socket?.close(1000, 'failed');
    }
    this.rejectDone(error);
  }

  /** Opens the next epoch (or confirms the current one) and answers every member concerned. */
  private form(next: ReturnType<typeof nextMembers>, changed: boolean): void {
    if (this.windowTimer !== null) clearTimeout(this.windowTimer);
    this.windowTimer = null;
    if (!changed && this.roster.current !== null) {
      const { members } = this.roster.current;
      this.finishSync(true);
      const same = this.sameEpoch();
      for (const id of members) {
        const member = this.roster.members.get(id);
        if (member !== undefined) this.send(member, same);
      }
      return;
    }
    this.forming = true;
    const epoch = (this.roster.current?.epoch ?? this.roster.previousEpoch) + 1;
    const world = { epoch, members: [...next.members] };
    this.stores
      .open(next.members.length)
      // Written before it is announced: a coordinator started again knows every epoch a member may report.
      .then(async (storeUrl) => {
        await this.stateFile?.write(this.stateOf(world));
        return storeUrl;
      })
      .then(
        (storeUrl) => {
          this.forming = false;
          if (this.closed) return;
          const announcement: EpochAnnouncement = {
            op: 'epoch',
            epoch,
            members: next.members,
            left: next.left,
            joined: next.joined,
            changed: true,
            storeUrl,
          };
          this.roster.current = world;
          this.history.push(announcement);
          this.options.onEpoch?.(announcement);
          this.finishSync(false);
          for (const id of next.members) {
            const member = this.roster.members.get(id);
            if (member !== undefined) this.send(member, announcement);
          }
          // Members that left while the store started are noticed at the next sync point.
          this.advance();
        },
        (error: unknown) => {
          this.forming = false;
          if (this.closed) return;
          if (ElasticError.isInstance(error)) return this.fail(error);
          const detail = `epoch ${epoch}'s store cannot listen: ${String(error)}`;
          this.fail(new ElasticError('coordinator', detail, { cause: error }));
        },
      );
  }

  /** The sync point is over: passed in the same epoch (`same`), or a new epoch starts. */
  private finishSync(same: boolean): void {
    if (this.syncTimer !== null) clearTimeout(this.syncTimer);
    this.syncTimer = null;
    for (const member of this.roster.members.values()) {
      if (this.roster.current?.members.includes(member.id)) {
        member.passed = same ? Math.max(member.passed, member.round + 1) : 0;
        member.syncedAt = null;
        member.rebuild = false;
      }
    }
  }
}
