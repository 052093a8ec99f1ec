import { ArgumentError } from '@webshard/tensor-core';
import {
  createNetworkTransport,
  JoinedTransport,
  type NetworkBackend,
} from '../connect-transport.js';
import { ProcessGroup, type ProcessGroupOptions } from '../process-group.js';
import { shareProgress } from '../progress/progress.js';
import { resolveRendezvousOptions } from '../rendezvous/env.js';
import type { Rendezvous } from '../rendezvous/rendezvous.js';
import { agreedLink, type LinkSettings, shapeLink } from '../two-level/link-shaper.js';
import { StoreClient, type WebSocketConstructor } from '../rendezvous/store-client.js';
import { CoordinatorLink } from './coordinator-link.js';
import { ElasticError, ElasticWorldTooSmallError } from './errors.js';
import { checkJoinTls, isNode, type JoinTls, trustingCoordinator } from './join-tls.js';
import type { CoordinatorMessage, EpochAnnouncement } from './protocol.js';

/** Options of `joinElastic`. */
export interface JoinElasticOptions {
  /** The coordinator's URL (`ws://host:port`, from `ElasticCoordinator.url`). */
  url: string;
  /** The join token (default `WEBSHARD_TOKEN` in Node, else none). */
  token?: string;
  /** The data transport of every epoch's group: `tcp` (default in Node) or `ws` (browsers). */
  backend?: NetworkBackend;
  /** A name the coordinator keeps for this member (logs); default empty. */
  name?: string;
  /** How long to wait to reach the coordinator and to be admitted (default 300 s). */
  timeoutMs?: number;
  /**
   * How long a member keeps trying to reach a coordinator that went away, training on meanwhile,
   * before it fails with code `E_COORDINATOR_LOST` ([Note: liveness in an elastic world]).
   * Default 300 s.
   */
  coordinatorTimeoutMs?: number;
  /** Deadline for building one epoch's group (store and every data connection); default 60 s. */
  connectTimeoutMs?: number;
  /**
   * Settings of every epoch's process group. Its ops' deadline defaults to twice the coordinator's
   * member timeout: a silent peer is dropped (and the group aborted) before it passes.
   */
  group?: ProcessGroupOptions;
  /** Address this member's data listener binds to and advertises (as `initProcessGroup`'s). */
  host?: string;
  /** `ws` only: accept connections (default: true in Node, false in browsers). */
  listen?: boolean;
  /**
   * The world is served over TLS (`url` is `wss://`): trust `ca` (PEM; Node only, for a private
   * CA) and, over `ws`, serve this member's listener as `wss://` with `cert` and `key` ([Note: an
   * elastic world over TLS]). A member that listens on nothing needs neither.
   */
  tls?: JoinTls;
  /** Overrides the WebSocket used for the coordinator and the stores. */
  WebSocket?: WebSocketConstructor;
  /**
   * A simulated link between every pair of members, as `initProcessGroup`'s ([Note: the link
   * shaper]): a preset's name (`broadband-20`), `WEBSHARD_LINK`-style settings or `LinkSettings`;
   * `none`: none. Every member of an epoch must give the same (checked against rank 0's through
   * the epoch's store). Default: none, and `WEBSHARD_LINK` is not read (a tab has no environment:
   * a job hands its members the link).
   */
  link?: LinkSettings | string;
}

/** Where a member stands in the current epoch. */
export interface Membership {
  /** The coordinator's id of this member (stable across epochs). */
  readonly id: number;
  /** Counts up from 0 with every change of membership. */
  readonly epoch: number;
  /** This member's rank in the epoch's group. */
  readonly rank: number;
  /** The epoch's number of members. */
  readonly worldSize: number;
  /** Member ids in rank order. */
  readonly members: readonly number[];
}

/** A new epoch: the membership, who left and who joined since the previous one. */
export interface MembershipChange extends Membership {
  /** Ids of the previous epoch's members that are gone. */
  readonly left: readonly number[];
  /** Ids admitted in this epoch (this member's own id when it was just admitted). */
  readonly joined: readonly number[];
  /**
   * This member was dropped (frozen or late past the coordinator's deadlines) and was admitted
   * again as a newcomer, with a new id: its state is stale, take the world's.
   */
  readonly rejoined?: boolean;
}

function failureOf(message: CoordinatorMessage, op: string, member: number): ElasticError {
  if (message.op === 'failed') {
    if (message.code === 'E_WORLD_TOO_SMALL') {
      return new ElasticWorldTooSmallError(op, {
        worldSize: message.worldSize,
        minWorldSize: message.minWorldSize,
        waitedMs: message.waitedMs,
        member,
      });
    }
    return new ElasticError(op, message.message, { member, code: message.code });
  }
  if (message.op === 'refused') {
    return new ElasticError(op, `refused by the coordinator: ${message.message}`, {
      member,
      code: message.code ?? 'E_REFUSED',
    });
  }
  return new ElasticError(op, `unexpected '${message.op}' from the coordinator`, {
    member,
    code: 'E_PROTOCOL',
  });
}

/**
 * A member of an elastic world: the current epoch's `ProcessGroup`, rebuilt whenever the
 * membership changes ([Note: elastic membership] in coordinator.ts). Call `sync()` at points
 * where the world may change (after a step, after a step that failed); after a change (and after
 * `joinElastic`), every member calls `broadcastState` so that all hold rank 0's state.
 */
export class ElasticGroup {
  private constructor(
    private link: CoordinatorLink,
    private readonly options: JoinElasticOptions,
    private current: ProcessGroup,
    private membershipNow: MembershipChange,
  ) {
    this.watch();
  }

  /** Sync points passed in the current epoch (the coordinator's `round`). */
  private round = 0;

  /** The link's liveness reaches the group: a dropped peer or a lost coordinator aborts it. */
  private watch(): void {
    const { link } = this;
    this.round = 0;
    link.resumeAs = {
      round: 0,
      token: this.options.token ?? '',
      name: this.options.name ?? '',
      id: this.membershipNow.id,
      epoch: this.membershipNow.epoch,
      members: this.membershipNow.members,
    };
    link.onDropped = (message) => {
      // One that left or whose link closed is noticed by the group itself (what it sent first
      // still arrives); one dropped as frozen would hold the group until its deadline.
      if (message.left === true) return;
      if (message.epoch === this.membershipNow.epoch && this.current.state === 'ready') {
        this.current.abort(
          `[elastic] member(s) ${message.members.join(', ')} dropped: ${message.reason}`,
        );
      }
    };
    link.onLost = (error) => {
      if (this.current.state === 'ready') this.current.abort(error.message);
    };
  }

  /** The current epoch's process group (a new object after every change). */
  get group(): ProcessGroup {
    return this.current;
  }

  /** This member's place in the current epoch. */
  get membership(): MembershipChange {
    return this.membershipNow;
  }

  /** @internal Joins: waits to be admitted, then builds the epoch's group. */
  static async join(options: JoinElasticOptions): Promise<ElasticGroup> {
    const timeoutMs = options.timeoutMs ?? 300_000;
    checkJoinTls(options);
    const WebSocket = await trustingCoordinator(options);
    const link = await CoordinatorLink.open(
      options.url,
      Math.min(timeoutMs, options.coordinatorTimeoutMs ?? timeoutMs),
      WebSocket,
      options.coordinatorTimeoutMs,
    );
    const token = options.token ?? (isNode() ? (process.env.WEBSHARD_TOKEN ?? '') : '');
    const resolved = { ...options, token };
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        link.close();
        reject(
          new ElasticError('join', `not admitted within ${timeoutMs} ms (timeoutMs)`, {
            code: 'E_TIMEOUT',
            ...(link.member !== undefined ? { member: link.member } : {}),
          }),
        );
      }, timeoutMs);
    });
    try {
      return await Promise.race([deadline, ElasticGroup.admit(link, resolved)]);
    } finally {
      clearTimeout(timer);
    }
  }

  private static async admit(
    link: CoordinatorLink,
    options: JoinElasticOptions,
  ): Promise<ElasticGroup> {
    link.send({ op: 'join', token: options.token ?? '', name: options.name ?? '' });
    const welcome = await link.next('join');
    if (welcome.op !== 'welcome') {
      link.close();
      throw failureOf(welcome, 'join', -1);
    }
    link.member = welcome.id;
    link.send({ op: 'sync', epoch: -1 });
    const first = await ElasticGroup.answer(link, 'join');
    const { group, change } = await ElasticGroup.enter(link, options, first, 'join');
    return new ElasticGroup(link, options, group, change);
  }

  /** The coordinator's answer to a sync: an epoch, or a typed failure. */
  private static async answer(link: CoordinatorLink, op: string): Promise<EpochAnnouncement> {
    const message = await link.next(op);
    if (message.op === 'epoch') return message;
    link.close();
    throw failureOf(message, op, link.member ?? -1);
  }

  /**
   * Builds the group of `announcement`'s epoch. When that fails (a member died between the
   * announcement and the connections), reports it at the epoch's sync point and tries the next.
   * A failure no other epoch can mend, this member's own data listener not opening or its link
   * unlike rank 0's, leaves the world with an `ElasticError` (`E_LISTEN`, `E_LINK`) instead:
   * retried, it would hold every member in rebuilds forever.
   */
  private static async enter(
    link: CoordinatorLink,
    options: JoinElasticOptions,
    announcement: EpochAnnouncement,
    op: 'join' | 'sync',
  ): Promise<{ group: ProcessGroup; change: MembershipChange }> {
    const id = link.member!;
    for (;;) {
      const change: MembershipChange = {
        id,
        epoch: announcement.epoch,
        rank: announcement.members.indexOf(id),
        worldSize: announcement.members.length,
        members: announcement.members,
        left: announcement.left,
        joined: announcement.joined,
      };
      // A member of this epoch lost meanwhile (the coordinator says `dropped`) will never open its
      // links: the build is given up and the epoch rebuilt; the abandoned build is closed if it
      // ever finishes (the coordinator closes its store two epochs on).
      const epoch = announcement.epoch;
      const lost = new Promise<never>((_, reject) => {
        link.onDropped = (message) => {
          if (message.epoch === epoch)
            reject(new Error(`member(s) ${message.members.join(', ')} dropped: ${message.reason}`));
        };
      });
      lost.catch(() => {});
      const build = buildEpochGroup(change, announcement.storeUrl, {
        ...options,
        group: { timeoutMs: 2 * link.memberTimeoutMs, ...options.group },
      });
      try {
        const group = await Promise.race([build, lost]);
        return { group, change };
      } catch (error) {
        build
          .then(
            (group) => group.close(),
            () => {},
          )
          .catch(() => {});
        // The coordinator notices who is gone; a missing member fails everyone's connections.
        if (ElasticError.isInstance(error)) throw error;
        const listen = listenFailure(error);
        if (listen !== undefined) {
          link.close();
          throw new ElasticError(
            op,
            `this member cannot open its data listener (${listen.message}); pass a host it can bind (host, WEBSHARD_HOST_ADDR) or, over ws, listen: false`,
            { member: id, code: 'E_LISTEN', cause: error },
          );
        }
        if (ArgumentError.isInstance(error)) {
          // A link unlike rank 0's ([Note: the link shaper]): no other epoch mends it either.
          link.close();
          throw new ElasticError(op, error.message, { member: id, code: 'E_LINK', cause: error });
        }
        link.send({ op: 'sync', epoch: announcement.epoch, rebuild: true });
        announcement = await ElasticGroup.answer(link, 'sync');
      }
    }
  }

  /**
   * A sync point: waits until every live member reaches it, then returns the new membership when
   * it changed (the old group is closed and a new one built: call `broadcastState` next), or
   * `null` when it did not. Pass `failed: true` after a step that failed (its group is rebuilt
   * even when nobody left); a group that aborted counts as failed. Rejects with
   * `ElasticWorldTooSmallError` when the world stays below its minimum.
   */
  async sync(options: { failed?: boolean } = {}): Promise<MembershipChange | null> {
    const rebuild = options.failed === true || this.current.state !== 'ready';
    if (this.link.closedCode === 'E_DROPPED') return this.rejoin();
    // The coordinator is away: nothing to report, so this member passes the point without it (the
    // coordinator, back, tells any member still waiting there that it passed: `round`).
    if (this.link.reconnecting && !rebuild) return this.passed();
    let announcement: EpochAnnouncement;
    try {
      this.link.send({ op: 'sync', epoch: this.membershipNow.epoch, rebuild, round: this.round });
      if (!rebuild) {
        // The coordinator lost before it answered: the point is passed without it.
        const answer = await this.link.answerUnlessBroken('sync');
        if (answer === null) return this.passed();
        this.link.pushBack(answer);
      }
      announcement = await ElasticGroup.answer(this.link, 'sync');
    } catch (error) {
      if (ElasticError.isInstance(error) && error.code === 'E_DROPPED') return this.rejoin();
      throw error;
    }
    if (!announcement.changed) return this.passed();
    await this.current.close().catch(() => {});
    const { group, change } = await ElasticGroup.enter(
      this.link,
      this.options,
      announcement,
      'sync',
    );
    this.current = group;
    this.membershipNow = change;
    this.watch();
    return change;
  }

  /** One more sync point passed in this epoch, with or without the coordinator. */
  private passed(): null {
    this.round += 1;
    if (this.link.resumeAs !== undefined)
      this.link.resumeAs = { ...this.link.resumeAs, round: this.round };
    return null;
  }

  /**
   * This member was dropped ([Note: liveness in an elastic world]): it joins again as a newcomer
   * (a new id, admitted at the world's next sync point) and says so (`rejoined`), so that it takes
   * the world's state instead of pushing its own stale one.
   */
  private async rejoin(): Promise<MembershipChange> {
    this.current.abort('[elastic] this member was dropped from the world');
    await this.current.close().catch(() => {});
    const fresh = await ElasticGroup.join(this.options);
    this.link = fresh.link;
    this.current = fresh.current;
    this.membershipNow = { ...fresh.membershipNow, rejoined: true };
    this.watch();
    return this.membershipNow;
  }

  /** Leaves the world (the others drop this member at their next sync point) and closes the group. */
  async close(): Promise<void> {
    this.link.close();
    await this.current.close().catch(() => {});
  }
}

/** The error of a listener that did not open (`syscall: 'listen'`), in `error` or its causes. */
function listenFailure(error: unknown): Error | undefined {
  for (let at = error, depth = 0; at instanceof Error && depth < 8; depth++) {
    if ((at as { syscall?: unknown }).syscall === 'listen') return at;
    at = at.cause;
  }
  return undefined;
}

/** Connects the epoch's store (as the rank the coordinator gave) and the data transport. */
async function buildEpochGroup(
  membership: Membership,
  storeUrl: string,
  options: JoinElasticOptions,
): Promise<ProcessGroup> {
  const url = new URL(storeUrl);
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const timeoutMs = options.connectTimeoutMs ?? 60_000;
  const { rank, worldSize } = membership;
  const token = options.token ?? '';
  const rendezvousOptions = resolveRendezvousOptions(
    {
      ...{ rank, worldSize, masterAddr: host, masterPort: Number(url.port), token, timeoutMs },
      ...(options.tls !== undefined ? { tls: options.tls } : {}),
    },
    {},
  );
  const store = await StoreClient.connect({
    url: storeUrl,
    token,
    rank,
    worldSize,
    timeoutMs,
    ...(options.tls?.ca !== undefined ? { ca: options.tls.ca } : {}),
    ...(options.WebSocket !== undefined ? { WebSocket: options.WebSocket } : {}),
  });
  const joined: Rendezvous = { options: rendezvousOptions, store, close: () => store.close() };
  let transport: Awaited<ReturnType<typeof createNetworkTransport>>;
  try {
    transport = await createNetworkTransport(options.backend ?? (isNode() ? 'tcp' : 'ws'), joined, {
      ...(options.host !== undefined ? { host: options.host } : {}),
      ...(options.listen !== undefined ? { listen: options.listen } : {}),
    });
  } catch (error) {
    await store.close();
    throw error;
  }
  if (options.link !== undefined) {
    // Shaped where the bytes move, as connectNetworkTransport does.
    try {
      const settings = await agreedLink(store, rank, options.link, timeoutMs);
      if (settings !== null) {
        const shaped = shapeLink(transport, settings);
        shareProgress(shaped, transport);
        transport = shaped;
      }
    } catch (error) {
      await transport.close();
      await store.close();
      throw error;
    }
  }
  const wrapper = new JoinedTransport(transport, joined);
  shareProgress(wrapper, transport);
  return ProcessGroup.fromTransport(wrapper, options.group);
}

/**
 * Joins an elastic world through its coordinator: waits until admitted at a sync point (every
 * member runs the same command, before the job starts or while it runs), then returns the member
 * with the current epoch's group built. Next, call `broadcastState` with the others.
 */
export function joinElastic(options: JoinElasticOptions): Promise<ElasticGroup> {
  return ElasticGroup.join(options);
}
