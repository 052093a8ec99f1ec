/**
 * The elastic coordinator's wire protocol: one JSON object per WebSocket text message, so a tab
 * joins with the native `WebSocket`. Browser-safe: no Node imports.
 *
 * [Note: the elastic protocol]
 * A member's first message is `join` with the token; the coordinator answers `welcome` with the
 * member's id (ids count up from 0 in order of arrival and are never reused) or `refused` and
 * closes. A member at a sync point sends `sync` with the epoch it has finished (-1 for a newcomer
 * waiting to be admitted) and whether its group broke. When every live member of the current epoch has sent it, the
 * coordinator answers each of them, and each admitted newcomer, with `epoch`: the epoch number,
 * the member ids in rank order, who left and who joined, and where the epoch's store is. Members
 * whose epoch did not change get the same epoch back with `changed: false`. `failed` ends the job
 * for everyone (the world stayed below the minimum). `leave` is a polite goodbye; a closed socket
 * is an impolite one.
 *
 * Liveness ([Note: liveness in an elastic world] in liveness.ts): the coordinator sends `beat`
 * every `heartbeatMs` (told in `welcome`) and each member answers `heartbeat` from its event loop;
 * a member silent for `memberTimeoutMs` is dropped, the current epoch's others get `dropped` (abort
 * your group now) and the dropped member `refused` with code `E_DROPPED`. A member whose
 * connection broke sends `resume` (its id and epoch) on a new one instead of `join`; it is welcomed
 * back only while it is still in the coordinator's current epoch.
 */

/** One epoch's world, as the coordinator announces it. */
export interface EpochAnnouncement {
  /** The message's kind on the wire. */
  readonly op: 'epoch';
  /** Counts up from 0 with every change of membership. */
  readonly epoch: number;
  /** Member ids in rank order: survivors in their old order, then newcomers by id. */
  readonly members: readonly number[];
  /** Ids of the members of the previous epoch that are gone. */
  readonly left: readonly number[];
  /** Ids of the members admitted in this epoch. */
  readonly joined: readonly number[];
  /** Whether the membership differs from the previous epoch's (false: same epoch, same group). */
  readonly changed: boolean;
  /** `ws://host:port` of the rendezvous store of this epoch's process group. */
  readonly storeUrl: string;
}

export type CoordinatorMessage =
  | {
      readonly op: 'welcome';
      readonly id: number;
      /** How often the coordinator beats (a member answers each beat). */
      readonly heartbeatMs?: number;
      /** A member silent this long is dropped; a coordinator silent this long is lost. */
      readonly memberTimeoutMs?: number;
    }
  | {
      readonly op: 'refused';
      readonly message: string;
      /** `E_DROPPED`: this member is no longer in the world (join again as a newcomer). */
      readonly code?: string;
    }
  | { readonly op: 'beat' }
  | {
      readonly op: 'dropped';
      /** The epoch the dropped members belonged to. */
      readonly epoch: number;
      /** Ids of the members dropped. */
      readonly members: readonly number[];
      readonly reason: string;
      /**
       * The members left or their connection closed (not dropped as frozen): a group already
       * built notices by itself, with the bytes they sent delivered; only a build still waiting
       * for them gives up.
       */
      readonly left?: boolean;
    }
  | EpochAnnouncement
  | {
      readonly op: 'failed';
      readonly code: string;
      readonly message: string;
      readonly worldSize: number;
      readonly minWorldSize: number;
      readonly waitedMs: number;
    };

export type MemberMessage =
  | { readonly op: 'join'; readonly token: string; readonly name: string }
  | {
      readonly op: 'sync';
      readonly epoch: number;
      /** The member's group broke (a lost link, a failed step): rebuild it even if nobody left. */
      readonly rebuild?: boolean;
      /** Sync points this member passed in this epoch: this is the next ([Note: liveness in an elastic world]). */
      readonly round?: number;
    }
  | { readonly op: 'leave' }
  | { readonly op: 'heartbeat' }
  | {
      readonly op: 'resume';
      readonly token: string;
      readonly name: string;
      /** The id the coordinator gave this member. */
      readonly id: number;
      /** The epoch this member is in. */
      readonly epoch: number;
      /** That epoch's member ids in rank order (a coordinator that lost its state adopts them). */
      readonly members: readonly number[];
      /** Sync points this member passed in this epoch (some maybe without the coordinator). */
      readonly round?: number;
    };

/** Largest message either side accepts, in bytes. */
export const MAX_ELASTIC_MESSAGE_BYTES = 1 << 20;

const isIdList = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((id) => Number.isSafeInteger(id) && id >= 0);

const isCount = (value: unknown): value is number =>
  Number.isSafeInteger(value) && (value as number) >= 0;

const isPositive = (value: unknown): value is number =>
  typeof value === 'number' && Number.isFinite(value) && value > 0;

function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const raw: unknown = JSON.parse(text);
    return typeof raw === 'object' && raw !== null && !Array.isArray(raw)
      ? (raw as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/** Parses a member's message on the coordinator; a string says why it is refused. */
export function parseMemberMessage(text: string): MemberMessage | string {
  const r = parseObject(text);
  if (r === undefined) return 'not a JSON object';
  switch (r.op) {
    case 'join':
      return typeof r.token === 'string' && typeof r.name === 'string' && r.name.length <= 256
        ? (r as MemberMessage)
        : 'bad join';
    case 'sync':
      return Number.isSafeInteger(r.epoch) &&
        (r.epoch as number) >= -1 &&
        (r.rebuild === undefined || typeof r.rebuild === 'boolean') &&
        (r.round === undefined || isCount(r.round))
        ? (r as MemberMessage)
        : 'bad sync';
    case 'leave':
      return { op: 'leave' };
    case 'heartbeat':
      return { op: 'heartbeat' };
    case 'resume':
      return typeof r.token === 'string' &&
        typeof r.name === 'string' &&
        r.name.length <= 256 &&
        Number.isSafeInteger(r.id) &&
        (r.id as number) >= 0 &&
        Number.isSafeInteger(r.epoch) &&
        (r.epoch as number) >= 0 &&
        isIdList(r.members) &&
        r.members.length <= 4096 &&
        (r.round === undefined || isCount(r.round))
        ? (r as MemberMessage)
        : 'bad resume';
    default:
      return 'unknown op';
  }
}

/** Parses a coordinator's message on a member; `undefined` for anything malformed. */
export function parseCoordinatorMessage(text: string): CoordinatorMessage | undefined {
  const r = parseObject(text);
  if (r === undefined) return undefined;
  switch (r.op) {
    case 'welcome':
      return Number.isSafeInteger(r.id) &&
        (r.heartbeatMs === undefined || isPositive(r.heartbeatMs)) &&
        (r.memberTimeoutMs === undefined || isPositive(r.memberTimeoutMs))
        ? (r as CoordinatorMessage)
        : undefined;
    case 'refused':
      return typeof r.message === 'string' && (r.code === undefined || typeof r.code === 'string')
        ? (r as CoordinatorMessage)
        : undefined;
    case 'beat':
      return { op: 'beat' };
    case 'dropped':
      return Number.isSafeInteger(r.epoch) &&
        isIdList(r.members) &&
        typeof r.reason === 'string' &&
        (r.left === undefined || typeof r.left === 'boolean')
        ? (r as CoordinatorMessage)
        : undefined;
    case 'epoch':
      return Number.isSafeInteger(r.epoch) &&
        isIdList(r.members) &&
        isIdList(r.left) &&
        isIdList(r.joined) &&
        typeof r.changed === 'boolean' &&
        typeof r.storeUrl === 'string'
        ? (r as CoordinatorMessage)
        : undefined;
    case 'failed':
      return typeof r.code === 'string' &&
        typeof r.message === 'string' &&
        Number.isSafeInteger(r.worldSize) &&
        Number.isSafeInteger(r.minWorldSize) &&
        Number.isSafeInteger(r.waitedMs)
        ? (r as CoordinatorMessage)
        : undefined;
    default:
      return undefined;
  }
}
