import { createHash, timingSafeEqual } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { ArgumentError } from '@webshard/tensor-core';
import { type WebSocket, WebSocketServer } from 'ws';
import { EpochStores, wsUrl } from './epoch-stores.js';
import { ElasticError, ElasticWorldTooSmallError } from './errors.js';
import { checkWorldBounds, nextMembers, type WorldBounds } from './membership.js';
import {
  type CoordinatorMessage,
  type EpochAnnouncement,
  MAX_ELASTIC_MESSAGE_BYTES,
  parseMemberMessage,
} from './protocol.js';

/** Options of `ElasticCoordinator.start`. */
export interface ElasticCoordinatorOptions extends WorldBounds {
  /** Port to listen on (default 0: a free one, read it from `port` or `url`). */
  port?: number;
  /** Address to bind and to announce for the epochs' stores (default `127.0.0.1`). */
  host?: string;
  /** The join token every member must present; required off loopback. */
  token?: string;
  /**
   * Forming the first epoch: once `minWorldSize` members wait, how long to wait for more (up to
   * `maxWorldSize`, which forms it at once). Default 0.
   */
  joinWindowMs?: number;
  /**
   * At a sync point, how long the members that arrived wait for the others before the latecomers
   * are dropped as gone (their connection is closed). Default 300 s.
   */
  syncTimeoutMs?: number;
  /** How long a world below `minWorldSize` waits for members to join before it fails. Default 60 s. */
  belowMinTimeoutMs?: number;
  /** A member that does not send a valid `join` within this time is disconnected. Default 10 s. */
  helloTimeoutMs?: number;
}

interface Member {
  readonly id: number;
  readonly name: string;
  readonly socket: WebSocket;
  /** The epoch whose sync point it reached (-1: a newcomer waiting), or null while it works. */
  syncedAt: number | null;
  rebuild: boolean;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);
const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();

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
  private readonly members = new Map<number, Member>();
  private nextId = 0;
  private current: { epoch: number; members: number[] } | null = null;
  private readonly stores: EpochStores;
  private syncTimer: ReturnType<typeof setTimeout> | null = null;
  private windowTimer: ReturnType<typeof setTimeout> | null = null;
  private belowMin: { timer: ReturnType<typeof setTimeout>; since: number } | null = null;
  private forming = false;
  private failure: ElasticError | null = null;
  private closed = false;
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
    private readonly options: Required<Omit<ElasticCoordinatorOptions, 'token'>> & {
      token: string;
    },
    /** The coordinator's URL, for members' `joinElastic({ url })`. */
    readonly url: string,
  ) {
    this.done = new Promise<void>((resolve, reject) => {
      this.resolveDone = resolve;
      this.rejectDone = reject;
    });
    this.done.catch(() => {});
    this.stores = new EpochStores(options.host, options.token);
    server.on('connection', (socket) => this.accept(socket));
  }

  /** Starts listening; resolves once members can join at `url`. */
  static async start(options: ElasticCoordinatorOptions): Promise<ElasticCoordinator> {
    checkWorldBounds(options, 'ElasticCoordinator');
    const host = options.host ?? '127.0.0.1';
    const token = options.token ?? '';
    if (!LOOPBACK.has(host) && token === '') {
      throw new ArgumentError(
        'ElasticCoordinator',
        `binding to ${host} needs a join token (option token or WEBSHARD_TOKEN)`,
      );
    }
    const server = new WebSocketServer({
      host,
      port: options.port ?? 0,
      maxPayload: MAX_ELASTIC_MESSAGE_BYTES,
    });
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    server.on('error', () => {});
    const port = (server.address() as AddressInfo).port;
    return new ElasticCoordinator(
      server,
      {
        minWorldSize: options.minWorldSize,
        maxWorldSize: options.maxWorldSize,
        port,
        host,
        token,
        joinWindowMs: options.joinWindowMs ?? 0,
        syncTimeoutMs: options.syncTimeoutMs ?? 300_000,
        belowMinTimeoutMs: options.belowMinTimeoutMs ?? 60_000,
        helloTimeoutMs: options.helloTimeoutMs ?? 10_000,
      },
      wsUrl(host, port),
    );
  }

  /** The port the coordinator listens on. */
  get port(): number {
    return this.options.port;
  }

  /** The current epoch (-1 before the first forms). */
  get epoch(): number {
    return this.current?.epoch ?? -1;
  }

  /** The current epoch's member ids in rank order. */
  get memberIds(): readonly number[] {
    return this.current?.members ?? [];
  }

  /** Ids of the members waiting to be admitted at the next sync point. */
  get waiting(): readonly number[] {
    const inWorld = new Set(this.current?.members ?? []);
    return this.waitingIds().filter((id) => !inWorld.has(id));
  }

  /** Disconnects every member, stops the stores and stops listening. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.clearTimers();
    for (const member of this.members.values()) member.socket.terminate();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.stores.close();
    this.resolveDone();
  }

  private clearTimers(): void {
    if (this.syncTimer !== null) clearTimeout(this.syncTimer);
    if (this.windowTimer !== null) clearTimeout(this.windowTimer);
    if (this.belowMin !== null) clearTimeout(this.belowMin.timer);
    this.syncTimer = this.windowTimer = this.belowMin = null;
  }

  private accept(socket: WebSocket): void {
    let member: Member | null = null;
    const hello = setTimeout(() => socket.terminate(), this.options.helloTimeoutMs);
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(hello);
      if (member !== null && this.members.get(member.id) === member) {
        this.members.delete(member.id);
        this.advance();
      }
    });
    socket.on('message', (data, isBinary) => {
      const message = isBinary ? 'binary message' : parseMemberMessage(data.toString());
      if (typeof message === 'string') {
        this.refuse(socket, message);
        return;
      }
      if (member === null) {
        if (message.op !== 'join') return this.refuse(socket, 'the first message must be join');
        if (!timingSafeEqual(digest(message.token), digest(this.options.token))) {
          return this.refuse(socket, message.token === '' ? 'no join token given' : 'wrong token');
        }
        if (this.failure !== null) return this.refuse(socket, this.failure.message);
        clearTimeout(hello);
        member = { id: this.nextId++, name: message.name, socket, syncedAt: null, rebuild: false };
        this.members.set(member.id, member);
        this.send(member, { op: 'welcome', id: member.id });
        return;
      }
      if (message.op === 'join') return this.refuse(socket, 'already joined');
      if (message.op === 'leave') {
        this.members.delete(member.id);
        socket.close(1000, 'bye');
        this.advance();
        return;
      }
      const current = this.current;
      const inWorld = current?.members.includes(member.id) ?? false;
      if (message.epoch === -1 ? inWorld : !inWorld || message.epoch !== current?.epoch) {
        return this.refuse(
          socket,
          `sync for epoch ${message.epoch}, but the current epoch is ${current?.epoch ?? -1} and member ${member.id} is ${inWorld ? '' : 'not '}in it`,
        );
      }
      member.syncedAt = message.epoch;
      member.rebuild = message.rebuild === true;
      if (inWorld && this.syncTimer === null) {
        this.syncTimer = setTimeout(() => this.dropLatecomers(), this.options.syncTimeoutMs);
      }
      this.advance();
    });
  }

  private refuse(socket: WebSocket, message: string): void {
    if (socket.readyState === socket.OPEN) {
      socket.send(JSON.stringify({ op: 'refused', message } satisfies CoordinatorMessage));
    }
    socket.close(4001, 'refused');
  }

  private send(member: Member, message: CoordinatorMessage): void {
    if (member.socket.readyState === member.socket.OPEN)
      member.socket.send(JSON.stringify(message));
  }

  /** Members of the current epoch that passed the sync deadline are dropped as gone. */
  private dropLatecomers(): void {
    this.syncTimer = null;
    const epoch = this.current?.epoch;
    for (const id of this.current?.members ?? []) {
      const member = this.members.get(id);
      if (member !== undefined && member.syncedAt !== epoch) {
        this.members.delete(id);
        member.socket.terminate();
      }
    }
    this.advance();
  }

  /** Re-examines the world after any event: forms the next epoch when a sync point is complete. */
  private advance(): void {
    if (this.closed || this.forming || this.failure !== null) return;
    const waiting = [...this.members.values()]
      .filter(
        (member) => member.syncedAt === -1 && !(this.current?.members.includes(member.id) ?? false),
      )
      .map((member) => member.id);
    const { minWorldSize, maxWorldSize } = this.options;
    if (this.current === null) {
      if (waiting.length < minWorldSize) {
        this.waitBelowMin(waiting.length);
        return;
      }
      this.stopBelowMin();
      if (waiting.length < maxWorldSize && this.options.joinWindowMs > 0) {
        this.windowTimer ??= setTimeout(() => {
          this.windowTimer = null;
          this.form(nextMembers([], new Set(), this.waitingIds(), this.options), false);
        }, this.options.joinWindowMs);
        return;
      }
      this.form(nextMembers([], new Set(), waiting, this.options), false);
      return;
    }
    const { epoch, members } = this.current;
    const live = members.filter((id) => this.members.has(id));
    if (!live.every((id) => this.members.get(id)!.syncedAt === epoch)) return;
    if (live.length === 0) {
      // Everyone left (the job ended, or every process died): newcomers cannot get the state.
      if (waiting.length > 0) this.fail(this.stateLost(waiting));
      else this.resolveDone();
      return;
    }
    const next = nextMembers(members, new Set(live), waiting, this.options);
    if (next.members.length < minWorldSize) {
      this.waitBelowMin(next.members.length);
      return;
    }
    this.stopBelowMin();
    const rebuild = live.some((id) => this.members.get(id)!.rebuild);
    this.form(next, next.left.length > 0 || next.joined.length > 0 || rebuild);
  }

  private waitingIds(): number[] {
    return [...this.members.values()].filter((m) => m.syncedAt === -1).map((m) => m.id);
  }

  private stateLost(waiting: readonly number[]): ElasticError {
    return new ElasticError(
      'coordinator',
      `every member of epoch ${this.current?.epoch} left: the job's state is lost, so the ${waiting.length} waiting member(s) cannot be admitted (restart the job, from a checkpoint)`,
      { code: 'E_STATE_LOST' },
    );
  }

  private waitBelowMin(worldSize: number): void {
    if (this.belowMin !== null) return;
    // Nobody is waiting at all before the first epoch: nothing to time out yet.
    if (this.current === null && worldSize === 0) return;
    const since = Date.now();
    const timer = setTimeout(() => {
      const waitedMs = Date.now() - since;
      this.fail(
        new ElasticWorldTooSmallError('coordinator', {
          worldSize: this.sizeIfFormedNow(),
          minWorldSize: this.options.minWorldSize,
          waitedMs,
        }),
      );
    }, this.options.belowMinTimeoutMs);
    this.belowMin = { timer, since };
  }

  private sizeIfFormedNow(): number {
    const live = (this.current?.members ?? []).filter((id) => this.members.has(id));
    return Math.min(this.options.maxWorldSize, live.length + this.waitingIds().length);
  }

  private stopBelowMin(): void {
    if (this.belowMin === null) return;
    clearTimeout(this.belowMin.timer);
    this.belowMin = null;
  }

  private fail(error: ElasticError): void {
    this.failure = error;
    this.clearTimers();
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
    for (const member of this.members.values()) {
      this.send(member, message);
      member.socket.close(1000, 'failed');
    }
    this.rejectDone(error);
  }

  /** Opens the next epoch (or confirms the current one) and answers every member concerned. */
  private form(next: ReturnType<typeof nextMembers>, changed: boolean): void {
    if (this.windowTimer !== null) clearTimeout(this.windowTimer);
    this.windowTimer = null;
    if (!changed && this.current !== null) {
      const { epoch, members } = this.current;
      const storeUrl = this.history.at(-1)?.storeUrl ?? '';
      this.finishSync();
      const same: EpochAnnouncement = {
        op: 'epoch',
        epoch,
        members,
        left: [],
        joined: [],
        changed,
        storeUrl,
      };
      for (const id of members) {
        const member = this.members.get(id);
        if (member !== undefined) this.send(member, same);
      }
      return;
    }
    this.forming = true;
    const epoch = (this.current?.epoch ?? -1) + 1;
    this.stores.open(next.members.length).then(
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
        this.current = { epoch, members: [...next.members] };
        this.history.push(announcement);
        this.finishSync();
        for (const id of next.members) {
          const member = this.members.get(id);
          if (member !== undefined) this.send(member, announcement);
        }
        // Members that left while the store started are noticed at the next sync point.
        this.advance();
      },
      (error: unknown) => {
        this.forming = false;
        if (this.closed) return;
        const detail = `epoch ${epoch}'s store cannot listen: ${String(error)}`;
        this.fail(new ElasticError('coordinator', detail, { cause: error }));
      },
    );
  }

  private finishSync(): void {
    if (this.syncTimer !== null) clearTimeout(this.syncTimer);
    this.syncTimer = null;
    for (const member of this.members.values()) {
      if (this.current?.members.includes(member.id)) {
        member.syncedAt = null;
        member.rebuild = false;
      }
    }
  }
}
