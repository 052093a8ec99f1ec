import type { AddressInfo } from 'node:net';
import { type WebSocket, WebSocketServer } from 'ws';
import { BelowMinimumWait, stateLostError } from './below-minimum.js';
import { EpochStores, wsUrl } from './epoch-stores.js';
import { ElasticError, ElasticWorldTooSmallError } from './errors.js';
import {
  type CoordinatorState,
  CoordinatorStateFile,
  loadCoordinatorState,
} from './coordinator-state-file.js';
import {
  checkCoordinatorOptions,
  type ElasticCoordinatorOptions,
  type ResolvedCoordinatorOptions,
  resolveCoordinatorOptions,
} from './coordinator-options.js';
import { acceptMember, refuseSocket, sendTo } from './coordinator-sockets.js';
import { HeartbeatSweep } from './liveness.js';
import { nextMembers } from './membership.js';
import { type Member, Roster } from './roster.js';
import {
  type CoordinatorMessage,
  type EpochAnnouncement,
  MAX_ELASTIC_MESSAGE_BYTES,
  parseMemberMessage,
} from './protocol.js';

/**
 * The elastic coordinator: tracks who is in the world, decides each epoch's membership at sync
 * points and hosts each epoch's rendezvous store ([Note: elastic membership]). Node only; it runs
 * beside the members (its own process, or the launcher's), never inside one, so any member may go.
 *
 * [Note: elastic membership]
 * Members join the coordinator over WebSocket ([Note: the elastic protocol]) and wait. The first
 * epoch forms once `minWorldSize` members wait (at once at `maxWorldSize`, else after
 * `joinWindowMs`). From then on, a sync point is complete when every member of the current epoch
 * whose connection is still open has reached it (one that does not within `syncTimeoutMs` is
 * dropped): a member whose connection closed has left, and newcomers are admitted up to
 * `maxWorldSize` ([Note: elastic rank order]). A changed membership (or a member whose group broke,
 * a lost link with every process alive) opens a new epoch: a fresh rendezvous store sized for it,
 * on which the members build a fresh process group over their transport; the store of the epoch
 * before the last is closed. Below `minWorldSize` the coordinator waits up to `belowMinTimeoutMs`
 * for newcomers, then fails every member with `ElasticWorldTooSmallError`. A world in which every
 * member left has lost its state: waiting newcomers are failed (code `E_STATE_LOST`).
 */
export class ElasticCoordinator {
  private readonly stores: EpochStores;
  private readonly roster = new Roster();
  private syncTimer: ReturnType<typeof setTimeout> | null = null;
  private windowTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly belowMin: BelowMinimumWait;
  private forming = false;
  private failure: ElasticError | null = null;
  private closed = false;
  private readonly sweep: HeartbeatSweep;
  private readonly stateFile: CoordinatorStateFile | null;
  private resolveDone!: () => void;
  private rejectDone!: (error: ElasticError) => void;
  /** Every announced change of membership, in order. */
  readonly history: EpochAnnouncement[] = [];
  /**
   * Settles when every member of a formed world has left (the job ended) or the coordinator
   * closes, or rejects when the job failed
   * (`ElasticWorldTooSmallError`, or `ElasticError` code `E_STATE_LOST`).
   */
  readonly done: Promise<void>;

  private constructor(
    private readonly server: WebSocketServer,
    private readonly options: ResolvedCoordinatorOptions,
    /** The coordinator's URL, for members' `joinElastic({ url })`. */
    readonly url: string,
    restored: CoordinatorState | null,
  ) {
    this.done = new Promise<void>((resolve, reject) => {
      this.resolveDone = resolve;
      this.rejectDone = reject;
    });
    this.done.catch(() => {});
    this.stores = new EpochStores(options.host, options.token);
    this.belowMin = new BelowMinimumWait(options.belowMinTimeoutMs);
    this.stateFile =
      options.statePath === null ? null : new CoordinatorStateFile(options.statePath);
    if (restored !== null) this.roster.restore(restored.epoch, restored.members, restored.nextId);
    this.sweep = new HeartbeatSweep(
      options.heartbeatMs,
      options.memberTimeoutMs,
      () => this.roster.members.values(),
      (watched) => this.send(watched as Member, { op: 'beat' }),
      (watched, silentMs) =>
        this.drop(
          watched as Member,
          `member ${watched.id} sent nothing for ${(silentMs / 1000).toFixed(1)} s (memberTimeoutMs ${options.memberTimeoutMs}): frozen or cut off`,
        ),
    );
    server.on('connection', (socket) => this.accept(socket));
  }

  /** The state file's contents for `world` (default the current one). */
  private stateOf(world = this.roster.current!): CoordinatorState {
    const { minWorldSize, maxWorldSize } = this.options;
    const { epoch, members } = world;
    return { version: 1, epoch, members, nextId: this.roster.nextId, minWorldSize, maxWorldSize };
  }

  /** Queues a write of the state file (a new id given): the epoch itself is written by `form`. */
  private persist(): void {
    if (this.stateFile !== null && this.roster.current !== null)
      this.stateFile.save(this.stateOf());
  }

  /** Starts listening; resolves once members can join at `url`. */
  static async start(options: ElasticCoordinatorOptions): Promise<ElasticCoordinator> {
    checkCoordinatorOptions(options);
    const server = new WebSocketServer({
      host: options.host ?? '127.0.0.1',
      port: options.port ?? 0,
      maxPayload: MAX_ELASTIC_MESSAGE_BYTES,
    });
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    server.on('error', () => {});
    const resolved = resolveCoordinatorOptions(options, (server.address() as AddressInfo).port);
    let restored: CoordinatorState | null = null;
    try {
      restored =
        resolved.statePath === null ? null : await loadCoordinatorState(resolved.statePath);
    } catch (error) {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      throw error;
    }
    return new ElasticCoordinator(server, resolved, wsUrl(resolved.host, resolved.port), restored);
  }

  /** The port the coordinator listens on. */
  get port(): number {
    return this.options.port;
  }

  /** The current epoch (-1 before the first forms). */
  get epoch(): number {
    return this.roster.current?.epoch ?? -1;
  }

  /** The current epoch's member ids in rank order. */
  get memberIds(): readonly number[] {
    return this.roster.current?.members ?? [];
  }

  /** Ids of the current epoch's members connected now (a restored world's, once they resume). */
  get connectedIds(): readonly number[] {
    return this.memberIds.filter((id) => this.roster.members.get(id)?.socket != null);
  }

  /** Ids of the members waiting to be admitted at the next sync point. */
  get waiting(): readonly number[] {
    const inWorld = new Set(this.roster.current?.members ?? []);
    return this.roster.waitingIds().filter((id) => !inWorld.has(id));
  }

  /** Disconnects every member, stops the stores and stops listening. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.clearTimers();
    this.sweep.stop();
    for (const member of this.roster.members.values()) member.socket?.terminate();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.stores.close();
    this.resolveDone();
  }

  private clearTimers(): void {
    if (this.syncTimer !== null) clearTimeout(this.syncTimer);
    if (this.windowTimer !== null) clearTimeout(this.windowTimer);
    this.belowMin.stop();
    this.syncTimer = this.windowTimer = null;
  }

  private accept(socket: WebSocket): void {
    let member: Member | null = null;
    acceptMember(socket, this.options, {
      refusal: () => this.failure?.message ?? null,
      join: (name) => {
        member = this.roster.add(name, socket);
        this.persist();
        this.welcome(member);
        return true;
      },
      resume: (message) => {
        member = this.resume(socket, message);
        return member !== null;
      },
      message: (message) => {
        if (member === null || this.roster.members.get(member.id) !== member) return;
        member.lastSeen = Date.now();
        if (message.op === 'heartbeat') return;
        if (message.op === 'leave') {
          this.roster.members.delete(member.id);
          socket.close(1000, 'bye');
          this.advance();
          return;
        }
        if (message.op === 'sync') {
          this.synced(member, message.epoch, message.rebuild === true, message.round);
        }
      },
      closed: () => {
        if (member !== null && this.roster.members.get(member.id) === member) {
          this.roster.members.delete(member.id);
          this.advance();
        }
      },
    });
  }

  /** A member reached the sync point of `epoch` (-1: a newcomer waiting to be admitted). */
  private synced(member: Member, epoch: number, rebuild: boolean, round?: number): void {
    const current = this.roster.current;
    const inWorld = current?.members.includes(member.id) ?? false;
    if (epoch === -1 ? inWorld : !inWorld || epoch !== current?.epoch) {
      refuseSocket(
        member.socket!,
        `sync for epoch ${epoch}, but the current epoch is ${current?.epoch ?? -1} and member ${member.id} is ${inWorld ? '' : 'not '}in it`,
      );
      return;
    }
    member.syncedAt = epoch;
    member.rebuild = rebuild;
    member.round = round ?? member.passed;
    this.releaseBehind();
    if (member.syncedAt === null) return;
    if (inWorld && this.syncTimer === null) {
      this.syncTimer = setTimeout(() => this.dropLatecomers(), this.options.syncTimeoutMs);
    }
    this.advance();
  }

  private welcome(member: Member): void {
    const { heartbeatMs, memberTimeoutMs } = this.options;
    this.send(member, { op: 'welcome', id: member.id, heartbeatMs, memberTimeoutMs });
  }

  /**
   * A member back on a new connection ([Note: liveness in an elastic world]): welcomed while it is
   * in the current epoch; a coordinator with no world yet adopts the one it reports.
   */
  private resume(
    socket: WebSocket,
    message: { id: number; name: string; epoch: number; members: readonly number[] },
  ): Member | null {
    const adopted = this.roster.current === null;
    const member = this.roster.resume(message, socket);
    if (typeof member === 'string') {
      refuseSocket(socket, member, 'E_DROPPED');
      return null;
    }
    if (adopted) this.persist();
    this.welcome(member);
    this.releaseBehind();
    return member;
  }

  private send(member: Member, message: CoordinatorMessage): void {
    if (member.socket !== null) sendTo(member.socket, message);
  }

  /**
   * Drops a member as gone ([Note: liveness in an elastic world]): it is told `E_DROPPED` and
   * disconnected, and the other members of the current epoch are told to abort their group.
   */
  private drop(member: Member, reason: string): void {
    if (this.roster.members.get(member.id) !== member) return;
    this.roster.members.delete(member.id);
    if (member.socket !== null)
      refuseSocket(member.socket, `dropped from the world: ${reason}`, 'E_DROPPED');
    const current = this.roster.current;
    if (current !== null && current.members.includes(member.id)) {
      const dropped: CoordinatorMessage = {
        op: 'dropped',
        epoch: current.epoch,
        members: [member.id],
        reason,
      };
      for (const id of current.members) {
        const other = this.roster.members.get(id);
        if (other !== undefined) this.send(other, dropped);
      }
    }
    this.advance();
  }

  /** Tells members waiting at a point another passed that nothing changed (`Roster.behind`). */
  private releaseBehind(): void {
    for (const member of this.roster.behind()) this.send(member, this.sameEpoch());
  }

  /** The answer to a sync point that changed nothing. */
  private sameEpoch(): EpochAnnouncement {
    const { epoch, members } = this.roster.current!;
    const storeUrl = this.history.at(-1)?.storeUrl ?? '';
    return { op: 'epoch', epoch, members, left: [], joined: [], changed: false, storeUrl };
  }

  /** Members of the current epoch that passed the sync deadline are dropped as gone. */
  private dropLatecomers(): void {
    this.syncTimer = null;
    const epoch = this.roster.current?.epoch;
    const seconds = this.options.syncTimeoutMs / 1000;
    for (const id of this.roster.current?.members ?? []) {
      const member = this.roster.members.get(id);
      if (member !== undefined && member.syncedAt !== epoch) {
        this.drop(
          member,
          `member ${id} did not reach the sync point of epoch ${epoch} within ${seconds} s (syncTimeoutMs)`,
        );
      }
    }
    this.advance();
  }

  /** The job is over: its state file goes, then `done` settles. */
  private end(): void {
    void (this.stateFile?.remove() ?? Promise.resolve()).then(() => this.resolveDone());
  }

  /** Re-examines the world after any event: forms the next epoch when a sync point is complete. */
  private advance(): void {
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

  private fail(error: ElasticError): void {
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
      .then(async (storeUrl) => (await this.stateFile?.write(this.stateOf(world)), storeUrl))
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

export type { ElasticCoordinatorOptions };
