import type { AbortReason } from '../errors.js';
import type { ShmHandle } from '../transports/shm/shm-layout.js';
import { ShmTransport } from '../transports/shm/shm-transport.js';

/**
 * The shm world of one node in a world of several (see [Note: two-level collectives] in
 * two-level-transport.ts). Its rings and arena are indexed by local rank, but every abort reason in
 * it speaks global ranks, as the launcher already writes them: a reason the transport raises
 * itself (its pump failed, a frame of the wrong size) names this rank's global number, and one that
 * arrives from another node (`abortGlobal`) is stored as it is. `tell` says `closed` to the launcher,
 * as a thread rank of one node does.
 */
export class NodeShmTransport extends ShmTransport {
  constructor(
    handle: ShmHandle,
    localRank: number,
    private readonly globalRank: number,
    private readonly tell: (event: 'closed') => void,
  ) {
    super(handle, localRank);
  }

  /** An abort this transport raised: its `origin` is a local rank, made global here. */
  override abort(reason: AbortReason): void {
    super.abort(reason.origin === this.rank ? { ...reason, origin: this.globalRank } : reason);
  }

  /** An abort that already names global ranks (from this rank's group or another node). */
  abortGlobal(reason: AbortReason): void {
    super.abort(reason);
  }

  override async close(): Promise<void> {
    await super.close();
    this.tell('closed');
  }
}
