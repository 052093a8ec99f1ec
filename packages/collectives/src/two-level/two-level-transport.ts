import type { AbortReason } from '../errors.js';
import type { OpStamp } from '../op-stamp.js';
import { AbortState, type Transport } from '../transport-contract.js';
import type { NodeShmTransport } from './node-shm-transport.js';
import type { NodeTopology } from './topology.js';

const noop = () => {};

/**
 * [Note: two-level collectives]
 * A world of several nodes whose ranks run as threads (`webshard-run --nnodes M`, ranks as threads
 * by default) has two media: the node's shared memory between node-mates, and the network (`tcp`
 * or `ws`) between nodes. `TwoLevelTransport` is one `Transport` over both: a message to a node-mate
 * goes through the node's `shm` rings, any other through the network transport, so every group,
 * sub-groups and point-to-point included, works unchanged over it. Which ranks share a node the
 * ranks tell each other at rendezvous (`NodeTopology`). The world group's all-reduce, all-gather
 * and reduce-scatter then split in two (two-level-plan.ts, as NCCL's and gloo's hierarchical
 * algorithms do): a phase inside each node on the node-mates' operands in place in the shm arena
 * ([Note: two-level node phases on staged memory] in staged-schedule.ts), and a phase
 * between the ranks of the same local index on every node, over the network, moving 1/L of the data each (L ranks per
 * node), so each node sends about what one rank of a flat ring would and the L connections between
 * two nodes run side by side. An all-reduce is a reduce-scatter in the node, an all-reduce of each
 * rank's slice between nodes and an all-gather in the node. A reduce-scatter keeps the world's
 * shard layout (`shardRange` over all ranks, node-major): node block b's shards are reduced in the
 * node so that local rank l holds the node's partial sum of shard b * L + l for every b, then a
 * ring between nodes reduce-scatters those pieces, leaving shard n * L + l on node n. An
 * all-gather runs the other way. f16 and bf16 stay in f32 between the phases and are rounded
 * once, and each element is reduced in one fixed order, so every rank gets the same bits.
 *
 * Failure: an abort on either medium aborts the other with the same reason (the node's shm world
 * holds global ranks, see `NodeShmTransport`), so a rank that dies on one node (its thread exits,
 * or the whole node is killed and its sockets close) fails every rank of every node with an error
 * naming it, within the network's detection time.
 */
export class TwoLevelTransport implements Transport {
  readonly kind: string;
  readonly rank: number;
  readonly size: number;
  private readonly state = new AbortState();
  private closing: Promise<void> | null = null;

  constructor(
    /** The node's shm world (local ranks). */
    readonly local: NodeShmTransport,
    /** Every rank of the world over the network (global ranks). */
    readonly network: Transport,
    readonly topology: NodeTopology,
    /** Runs after both transports closed (leaves the rendezvous). */
    private readonly onClosed: () => Promise<void> = async () => {},
  ) {
    this.rank = network.rank;
    this.size = network.size;
    this.kind = `shm+${network.kind}`;
    // Closing is not a failure: a transport that closes may report it as its own abort (tcp does),
    // which must not reach the node-mates still running.
    local.onAbort((reason) => {
      if (this.closing === null) this.abort(reason);
    });
    network.onAbort((reason) => {
      if (this.closing === null) this.abort(reason);
    });
  }

  /** Whether `peer` is on this rank's node. */
  private isLocal(peer: number): boolean {
    return this.topology.nodeOf(peer) === this.topology.nodeOf(this.rank);
  }

  send(peer: number, tag: number, data: Uint8Array, stamp?: OpStamp): Promise<void> {
    if (this.isLocal(peer))
      return this.local.send(this.topology.localRankOf(peer), tag, data, stamp);
    return this.network.send(peer, tag, data, stamp);
  }

  /** Rule 11 of [Note: the transport contract], passed to the medium of `peer`'s messages. */
  expect(peer: number, tag: number, stamp: OpStamp, bytes: number, messages: number): () => void {
    if (this.isLocal(peer)) {
      const local = this.topology.localRankOf(peer);
      return this.local.expect(local, tag, stamp, bytes, messages);
    }
    return this.network.expect?.(peer, tag, stamp, bytes, messages) ?? noop;
  }

  recv(
    peer: number,
    tag: number,
    dst: Uint8Array,
    onArrive?: () => void,
    stamp?: OpStamp,
  ): Promise<void> {
    if (this.isLocal(peer))
      return this.local.recv(this.topology.localRankOf(peer), tag, dst, onArrive, stamp);
    return this.network.recv(peer, tag, dst, onArrive, stamp);
  }

  get abortReason(): AbortReason | null {
    // Reading the media's reasons polls them (shm reads its shared abort word).
    const seen = this.local.abortReason ?? this.network.abortReason;
    if (seen !== null && this.closing === null) this.abort(seen);
    return this.state.reason;
  }

  abort(reason: AbortReason): void {
    if (!this.state.trigger(reason)) return;
    this.local.abortGlobal(reason);
    this.network.abort(reason);
  }

  onAbort(listener: (reason: AbortReason) => void): () => void {
    return this.state.on(listener);
  }

  close(): Promise<void> {
    if (this.closing !== null) return this.closing;
    let started!: () => void;
    // Set before either transport starts closing: tcp reports its close as an abort at once.
    this.closing = new Promise<void>((resolve) => {
      started = resolve;
    }).then(async () => {
      await Promise.all([this.local.close(), this.network.close()]);
      await this.onClosed();
    });
    started();
    return this.closing;
  }
}

/** The two-level transport under a group, or null when its transport is anything else. */
export function twoLevelOf(transport: Transport): TwoLevelTransport | null {
  return transport instanceof TwoLevelTransport ? transport : null;
}
