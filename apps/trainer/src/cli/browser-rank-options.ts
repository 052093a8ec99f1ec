import { UsageError } from '../errors.js';
import type { TrainConfig } from '../config.js';

/**
 * `--browser-ranks k`: what a run with browser tabs as ranks can do, refused by name before
 * anything starts. Tabs join over `ws` only (a page has no raw sockets or shared memory with
 * Node), as ranks of ddp or fsdp; rank 0 stays in Node, since it hosts the rendezvous store. A
 * page reads no files, so flags whose files every rank reads (`--init`, `--resume`) or writes
 * (`--checkpoint-every`: fsdp's shards are every rank's) are refused; rank 0's outputs (`--save`,
 * `--samples`, `--report`, `--log-jsonl`) stay.
 */
export function checkBrowserRanks(config: TrainConfig): void {
  const k = config.browserRanks;
  if (k === 0 && config.elasticCoordinator) {
    // The coordinator binds and announces --browser-host, and serves tabs its page on
    // --browser-port ([Note: browser tabs in an elastic world]).
    checkBrowserHost(config.browserHost);
    return;
  }
  if (k === 0) {
    if (config.browserPort !== 0) {
      throw new UsageError('--browser-port applies with --browser-ranks or --elastic-coordinator', {
        option: '--browser-port',
      });
    }
    if (config.browserHost !== '127.0.0.1') {
      throw new UsageError('--browser-host applies with --browser-ranks or --elastic-coordinator', {
        option: '--browser-host',
      });
    }
    return;
  }
  checkBrowserHost(config.browserHost);
  const refuse = (option: string, why: string) => {
    throw new UsageError(`--browser-ranks ${k}: ${why}`, { option });
  };
  if (config.strategy !== 'ddp' && config.strategy !== 'fsdp') {
    refuse(
      '--strategy',
      `browser tabs train as ranks of --strategy ddp or fsdp, not ${config.strategy}`,
    );
  }
  if (config.transport !== 'ws') {
    refuse('--transport', `browser tabs join over --transport ws, not ${config.transport}`);
  }
  if (k >= config.worldSize) {
    refuse(
      '--world-size',
      `--world-size ${config.worldSize} leaves no Node rank, and rank 0 must be one: it hosts the rendezvous store`,
    );
  }
  const files: [string, boolean][] = [
    ['--init', config.init !== null],
    ['--resume', config.resume !== null],
    ['--checkpoint-every', config.checkpointEvery > 0],
  ];
  for (const [option, given] of files) {
    if (given)
      refuse(
        option,
        `${option} needs files on every rank, and a browser tab reads and writes none`,
      );
  }
}

/** Addresses that bind every interface: a tab cannot dial them, and the job advertises its host. */
const ANY_ADDRESS = new Set(['0.0.0.0', '::', '[::]', '']);

/**
 * `--browser-host`: one address tabs can reach (an IP or a host name of this machine), since the
 * job both listens on it and gives it to the tabs (in the join URL and the Node ranks' addresses).
 */
function checkBrowserHost(host: string): void {
  if (ANY_ADDRESS.has(host.trim())) {
    throw new UsageError(
      `--browser-host ${JSON.stringify(host)}: give the address tabs reach this machine at (its IP or host name on their network), not one that means every interface: the job listens on it and tells the tabs to dial it`,
      { option: '--browser-host' },
    );
  }
  if (/[\s/#?@]/.test(host)) {
    throw new UsageError(`--browser-host ${JSON.stringify(host)}: not a host name or address`, {
      option: '--browser-host',
    });
  }
}
