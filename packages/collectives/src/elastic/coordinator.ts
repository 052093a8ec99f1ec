import type { AddressInfo } from 'node:net';
import type { WebSocket, WebSocketServer } from 'ws';
import { type CoordinatorState, loadCoordinatorState } from './coordinator-state-file.js';
import { EpochFormer } from './epoch-former.js';
import { wsUrl } from './epoch-stores.js';
import { listenCoordinator, type SecureServer } from './coordinator-listen.js';
import {
  checkCoordinatorOptions,
  type ElasticCoordinatorOptions,
  type ResolvedCoordinatorOptions,
  resolveCoordinatorOptions,
} from './coordinator-options.js';
import { acceptMember, refuseSocket, sendTo } from './coordinator-sockets.js';
import { HeartbeatSweep } from './liveness.js';
import { type Member, Roster } from './roster.js';
import type { CoordinatorMessage, EpochAnnouncement } from './protocol.js';

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
  private readonly roster = new Roster();
  private readonly epochs: EpochFormer;
  private closed = false;
  private readonly sweep: HeartbeatSweep;
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
    /** The https server under `server` when it serves `wss://`, closed with it. */
    private readonly secure: SecureServer | null = null,
  ) {
    this.epochs = new EpochFormer(this.roster, options, (member, message) =>
      this.send(member, message),
    );
    this.done = this.epochs.done;
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

  /** Starts listening; resolves once members can join at `url`. */
  static async start(options: ElasticCoordinatorOptions): Promise<ElasticCoordinator> {
    checkCoordinatorOptions(options);
    // The state first: between listening and the constructor, which serves connections, nothing
    // may wait. A member that reconnected in such a gap (a coordinator restarted, its state file
    // loading) had its socket opened and never served: it was dropped at the member timeout and
    // came back as a newcomer, one change more than the restart.
    const restored =
      options.statePath === undefined ? null : await loadCoordinatorState(options.statePath);
    const { server, secure } = await listenCoordinator(options);
    const resolved = resolveCoordinatorOptions(options, (server.address() as AddressInfo).port);
    const url = wsUrl(resolved.host, resolved.port, secure !== null);
    return new ElasticCoordinator(server, resolved, url, restored, secure);
  }

  /** The port the coordinator listens on. */
  get port(): number {
    return this.options.port;
  }

  /** Every announced change of membership, in order. */
  get history(): readonly EpochAnnouncement[] {
    return this.epochs.history;
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
    this.sweep.stop();
    // First, so that the members' sockets closing below form no epoch.
    const epochsClosed = this.epochs.close();
    for (const member of this.roster.members.values()) member.socket?.terminate();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.secure?.close();
    await epochsClosed;
  }

  private accept(socket: WebSocket): void {
    let member: Member | null = null;
    acceptMember(socket, this.options, {
      refusal: () => this.epochs.failure?.message ?? null,
      join: (name) => {
        member = this.roster.add(name, socket);
        this.epochs.persist();
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
          this.tellDropped(member.id, `member ${member.id} left`, true);
          socket.close(1000, 'bye');
          this.epochs.advance();
          return;
        }
        if (message.op === 'sync') {
          this.synced(member, message.epoch, message.rebuild === true, message.round);
        }
      },
      closed: () => {
        if (member !== null && this.roster.members.get(member.id) === member) {
          this.roster.members.delete(member.id);
          this.tellDropped(
            member.id,
            `member ${member.id}'s connection to the coordinator closed`,
            true,
          );
          this.epochs.advance();
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
    if (inWorld) this.epochs.startSyncDeadline(() => this.dropLatecomers());
    this.epochs.advance();
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
    if (adopted) this.epochs.persist();
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
    this.tellDropped(member.id, reason);
    this.epochs.advance();
  }

  /**
   * Tells the other members of the current epoch that `id` is gone, so that they abort its group
   * (dropped as frozen), or give up building it (`left`: a member gone before it opened its data
   * links would otherwise hold the others in the epoch's rendezvous until its deadline).
   */
  private tellDropped(id: number, reason: string, left = false): void {
    const current = this.roster.current;
    if (!current?.members.includes(id)) return;
    const dropped: CoordinatorMessage = {
      op: 'dropped',
      epoch: current.epoch,
      members: [id],
      reason,
      ...(left ? { left } : {}),
    };
    for (const other of current.members) {
      const member = this.roster.members.get(other);
      if (member !== undefined) this.send(member, dropped);
    }
  }

  /** Tells members waiting at a point another passed that nothing changed (`Roster.behind`). */
  private releaseBehind(): void {
    for (const member of this.roster.behind()) this.send(member, this.epochs.sameEpoch());
  }

  /** Members of the current epoch that passed the sync deadline are dropped as gone. */
  private dropLatecomers(): void {
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
    this.epochs.advance();
  }
}

export type { ElasticCoordinatorOptions };
