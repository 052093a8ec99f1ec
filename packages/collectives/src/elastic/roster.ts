import type { WebSocket } from 'ws';

/** One member as the coordinator knows it. */
export interface Member {
  readonly id: number;
  readonly name: string;
  /** null: a member of a restored world that has not resumed yet. */
  readonly socket: WebSocket | null;
  /** `Date.now()` when it was last heard from. */
  lastSeen: number;
  /** The epoch whose sync point it reached (-1: a newcomer waiting), or null while it works. */
  syncedAt: number | null;
  rebuild: boolean;
  /** Sync points it passed in the current epoch. */
  passed: number;
  /** The round of the sync it waits at (when `syncedAt` is the epoch). */
  round: number;
}

/**
 * The coordinator's table of members and its world: who is connected, the current epoch and its
 * members in rank order, the next id to give; and a world taken back after a restart, whose
 * members count as live until they resume or the member timeout drops them
 * ([Note: liveness in an elastic world]).
 */
export class Roster {
  readonly members = new Map<number, Member>();
  nextId = 0;
  current: { epoch: number; members: number[] } | null = null;
  /** The epoch number before the current one when a restored world was forgotten. */
  previousEpoch = -1;
  /** The world came from a state file (or a member's report) and no member has resumed yet. */
  restoredUnclaimed = false;

  /** A newcomer. */
  add(name: string, socket: WebSocket): Member {
    const member: Member = {
      id: this.nextId++,
      name,
      socket,
      lastSeen: Date.now(),
      syncedAt: null,
      rebuild: false,
      passed: 0,
      round: 0,
    };
    this.members.set(member.id, member);
    return member;
  }

  /** Takes back a world: its members count as live (not yet resumed) for one member timeout. */
  restore(epoch: number, members: readonly number[], nextId: number): void {
    this.current = { epoch, members: [...members] };
    this.nextId = Math.max(this.nextId, nextId);
    this.restoredUnclaimed = true;
    const now = Date.now();
    for (const id of members) {
      this.members.set(id, {
        id,
        name: '',
        socket: null,
        lastSeen: now,
        syncedAt: null,
        rebuild: false,
        passed: 0,
        round: 0,
      });
    }
  }

  /**
   * A member back on a new connection: taken while it is in the current epoch (a roster that has
   * seen nobody yet adopts the world it reports); otherwise the reason it is refused.
   */
  resume(
    message: {
      id: number;
      name: string;
      epoch: number;
      members: readonly number[];
      round?: number;
    },
    socket: WebSocket,
  ): Member | string {
    const { id, epoch, members } = message;
    if (this.current === null && this.members.size === 0 && this.nextId === 0) {
      if (members.includes(id)) this.restore(epoch, members, Math.max(...members) + 1);
    }
    const current = this.current;
    const before = this.members.get(id);
    if (current === null || epoch !== current.epoch || before === undefined) {
      const where =
        current === null
          ? 'has formed no world yet'
          : `is at epoch ${current.epoch} with members [${current.members.join(', ')}]`;
      return `member ${id} of epoch ${epoch} is not in the world: the coordinator ${where} (it was dropped, or the world went on without it): join again as a newcomer`;
    }
    if (!current.members.includes(id)) return `member ${id} is not in epoch ${epoch}`;
    if (before.socket !== null && before.socket !== socket) before.socket.terminate();
    const member: Member = {
      ...before,
      name: message.name,
      socket,
      lastSeen: Date.now(),
      passed: Math.max(before.passed, message.round ?? 0),
    };
    this.members.set(id, member);
    this.restoredUnclaimed = false;
    return member;
  }

  /** Whether `id` is a member of the current epoch. */
  inWorld(id: number): boolean {
    return this.current?.members.includes(id) ?? false;
  }

  /** The most sync points a live member of the current epoch passed. */
  mostPassed(): number {
    let most = 0;
    for (const id of this.current?.members ?? []) {
      most = Math.max(most, this.members.get(id)?.passed ?? 0);
    }
    return most;
  }

  /**
   * Members waiting at a sync point that another member already passed without the coordinator
   * (it was away), now counted as past it: they are told nothing changed, as that member was
   * ([Note: liveness in an elastic world]). One that asks for a rebuild keeps waiting.
   */
  behind(): Member[] {
    const current = this.current;
    if (current === null) return [];
    const most = this.mostPassed();
    const released: Member[] = [];
    for (const id of current.members) {
      const member = this.members.get(id);
      if (member?.syncedAt !== current.epoch || member.rebuild || member.round >= most) continue;
      member.syncedAt = null;
      member.passed = member.round + 1;
      released.push(member);
    }
    return released;
  }

  /** Ids of every member waiting at a sync point as a newcomer. */
  waitingIds(): number[] {
    return [...this.members.values()].filter((m) => m.syncedAt === -1).map((m) => m.id);
  }

  /** A restored world nobody resumed is forgotten (it was an earlier job's): true if it was. */
  forgetUnclaimed(): boolean {
    if (!this.restoredUnclaimed || this.current === null) return false;
    this.restoredUnclaimed = false;
    this.previousEpoch = this.current.epoch;
    this.current = null;
    return true;
  }
}
