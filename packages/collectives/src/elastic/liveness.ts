/*
 * [Note: liveness in an elastic world]
 * A member that dies closes its sockets and the others regroup. A member that freezes (a laptop's
 * lid closed, SIGSTOP, a browser freezing a hidden page) closes nothing: its peers' kernels still
 * hold the connections open, so without more a collective waits for it forever. So the
 * coordinator beats: every `heartbeatMs` (a sixth of the member timeout) it sends each member
 * `beat`, and a member answers `heartbeat` from its event loop (a message handler, so a hidden
 * tab's throttled timers do not delay it). Any message from a member counts. A member silent for
 * `memberTimeoutMs` (default 60 s) is frozen or cut off: the coordinator drops it as if it had
 * died (its connection is closed after `refused` with code `E_DROPPED`), and tells every other
 * member of the current epoch `dropped`, so that they abort their group: the collective waiting on
 * the silent member fails at once, the step is run again in the new world. How slow is too slow:
 * a member is alive while its event loop runs at least once every `memberTimeoutMs`; a step of any
 * length is fine as long as no stretch of synchronous work in it reaches the member timeout. A
 * member that wakes after it was dropped reads `E_DROPPED` (or is refused on `resume`) and joins
 * again as a newcomer: it takes the world's state, never pushes its stale gradients.
 *
 * A member that leaves or whose link closes is told to the others as well (`dropped` with
 * `left`): a group already built ignores it (its links notice the loss themselves, after the bytes
 * the member sent first), but a member still building the epoch's group gives the build up and
 * asks for the next epoch; else a member gone before it opened its data links (its own listener
 * failed: `E_LISTEN`, which that member does not retry) held the others in the epoch's rendezvous.
 *
 * The members watch the coordinator the same way: no message for `memberTimeoutMs` (or a closed
 * connection) and a member reconnects with backoff, sending `resume` with its id and epoch, for up
 * to its `coordinatorTimeoutMs`, then fails with `E_COORDINATOR_LOST`. Meanwhile it trains on:
 * its collectives run over its own links, and a sync point with nothing to report passes without
 * the coordinator (as does one whose answer the coordinator took with it when it died). Members
 * count the sync points they passed in an epoch (`round`, sent with each `sync` and `resume`):
 * one back at the coordinator, waiting at a point another member already passed without it, is
 * told at once that nothing changed, as that member was; else each would wait for the other, one
 * at the coordinator, the other in the next step's collective. A member whose group broke keeps
 * waiting: the others fail their next step and meet it at the next point. A coordinator started again on the same address takes its state from its
 * state file (`statePath`: the epoch, its members, the next id), or without one adopts the epoch
 * the first member to resume reports; a member of another epoch (or a member not in it) is refused
 * with `E_DROPPED`. A restored world that no member resumes within the member timeout ended while
 * the coordinator was away (members that finish during an outage leave without a word), or was an
 * earlier job's: the coordinator forgets it, forms a new one from the newcomers waiting, and with
 * none the job is over (`done`).
 *
 * Split brain: only the coordinator forms epochs, so two parts of a world that lose sight of each
 * other cannot both go on as the same epoch. The part the coordinator hears goes on (the other
 * part's members are dropped after the member timeout); the part cut off from it fails its next
 * collective, cannot form an epoch without it, and ends with `E_COORDINATOR_LOST` after its
 * coordinator timeout, or, reconnecting before, is refused (`E_DROPPED`: its epoch is over) and
 * joins again as newcomers.
 */

/** What the sweep needs of a member. */
export interface Watched {
  readonly id: number;
  /** `Date.now()` when it was last heard from. */
  lastSeen: number;
}

/**
 * The coordinator's heartbeat: every `heartbeatMs`, `beat` each member, then `drop` those silent
 * for longer than `memberTimeoutMs` ([Note: liveness in an elastic world]).
 */
export class HeartbeatSweep {
  private readonly timer: ReturnType<typeof setInterval>;

  constructor(
    readonly heartbeatMs: number,
    readonly memberTimeoutMs: number,
    members: () => Iterable<Watched>,
    beat: (member: Watched) => void,
    drop: (member: Watched, silentMs: number) => void,
  ) {
    this.timer = setInterval(() => {
      const now = Date.now();
      const silent: [Watched, number][] = [];
      for (const member of members()) {
        const quiet = now - member.lastSeen;
        if (quiet > memberTimeoutMs) silent.push([member, quiet]);
        else beat(member);
      }
      for (const [member, quiet] of silent) drop(member, quiet);
    }, heartbeatMs);
  }

  stop(): void {
    clearInterval(this.timer);
  }
}

/** The default member timeout (`--member-timeout`): 60 s. */
export const DEFAULT_MEMBER_TIMEOUT_MS = 60_000;

/** The coordinator beats this many times per member timeout. */
export const BEATS_PER_TIMEOUT = 6;
