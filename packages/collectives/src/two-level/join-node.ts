import { ArgumentError } from '@webshard/tensor-core';
import { createNetworkTransport, type NetworkTransportOptions } from '../connect-transport.js';
import { ProcessGroup, type ProcessGroupOptions } from '../process-group.js';
import { publishedBy } from '../rendezvous/published-by.js';
import { rendezvous } from '../rendezvous/rendezvous.js';
import type { ThreadRank } from '../transports/shm/thread-rank.js';
import type { Transport } from '../transport-contract.js';
import { agreedLink, type LinkSettings, shapeLink } from './link-shaper.js';
import { NodeShmTransport } from './node-shm-transport.js';
import { NodeTopology, type RankPlace } from './topology.js';
import { TwoLevelTransport } from './two-level-transport.js';

/** `initProcessGroup`'s options as a thread rank of a node of several uses them. */
export interface JoinNodeOptions extends Omit<NetworkTransportOptions, 'backend'> {
  backend?: NetworkTransportOptions['backend'];
  group?: ProcessGroupOptions;
  /** A simulated link between nodes (see `LinkShaper`); default `WEBSHARD_LINK`, else none. */
  link?: LinkSettings | string;
}

let joined = false;

/**
 * Joins a world of several nodes from a thread rank (see [Note: two-level collectives] in
 * two-level-transport.ts): the rendezvous with the global rank of the environment (`RANK`,
 * `WORLD_SIZE`, ... as `webshard-run` sets them), this rank's place (its node's shm world and local
 * rank) published to every rank and read back as a `NodeTopology`, the network transport to every
 * rank, and the node's shm world, under one `TwoLevelTransport`.
 */
export async function joinThreadNode(
  thread: ThreadRank,
  options: JoinNodeOptions,
): Promise<ProcessGroup> {
  const node = thread.node!;
  if (joined) {
    throw new ArgumentError(
      'initProcessGroup',
      `local rank ${thread.rank}'s thread already joined its world: call initProcessGroup once per rank`,
    );
  }
  joined = true;
  const { group, backend, host, maxMessageBytes, listen, link, ...rest } = options;
  const meeting = await rendezvous(rest);
  const { rank, worldSize, localRank, timeoutMs } = meeting.options;
  let local: NodeShmTransport | null = null;
  let network: Transport | null = null;
  try {
    if (localRank !== thread.rank) {
      throw new ArgumentError(
        'initProcessGroup',
        `rank ${rank} says LOCAL_RANK ${localRank}, but webshard-run started it as local rank ${thread.rank}`,
      );
    }
    const place: RankPlace = {
      node: node.id,
      localRank: thread.rank,
      localSize: thread.handle.size,
      host: node.host,
    };
    await meeting.store.set(`two-level/place/${rank}`, JSON.stringify(place));
    const places = await Promise.all(
      Array.from(
        { length: worldSize },
        async (_, peer) =>
          JSON.parse(
            await publishedBy(
              meeting.store,
              `two-level/place/${peer}`,
              peer,
              timeoutMs,
              'initProcessGroup',
            ),
          ) as RankPlace,
      ),
    );
    const topology = new NodeTopology(places);
    const settings = await agreedLink(meeting.store, rank, link, timeoutMs);
    local = new NodeShmTransport(thread.handle, thread.rank, rank, (event) => thread.tell(event));
    network = await createNetworkTransport(backend ?? 'tcp', meeting, {
      ...(host !== undefined ? { host } : {}),
      ...(maxMessageBytes !== undefined ? { maxMessageBytes } : {}),
      ...(listen !== undefined ? { listen } : {}),
    });
    if (settings !== null) network = shapeLink(network, settings);
    const transport = new TwoLevelTransport(local, network, topology, () => meeting.close());
    thread.tell('joined');
    return ProcessGroup.fromTransport(transport, group);
  } catch (error) {
    await network?.close();
    await local?.close();
    await meeting.close();
    throw error;
  }
}
