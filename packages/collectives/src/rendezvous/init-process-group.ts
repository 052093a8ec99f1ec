import { ProcessGroup, type ProcessGroupOptions } from '../process-group.js';
import { connectNetworkTransport, type NetworkTransportOptions } from '../connect-transport.js';

/** Options of `initProcessGroup`: the network transport, its rendezvous, and the group's settings. */
export interface InitProcessGroupOptions extends NetworkTransportOptions {
  /** Settings of the world group (deadlines, segment sizes). */
  group?: ProcessGroupOptions;
}

/**
 * torch.distributed's `init_process_group` for webshard over the network: joins the rendezvous
 * (rank 0 hosts the store; options not given come from `RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
 * `MASTER_PORT`, `LOCAL_RANK` and `WEBSHARD_TOKEN`, as `webshard-run` sets them), connects the
 * `tcp` or `ws` transport to every rank and returns the world group. Closing the group closes the
 * transport and leaves the rendezvous.
 */
export async function initProcessGroup(options: InitProcessGroupOptions): Promise<ProcessGroup> {
  const { group, ...transportOptions } = options;
  const transport = await connectNetworkTransport(transportOptions);
  return ProcessGroup.fromTransport(transport, group);
}
