import { ElasticCoordinator } from '@webshard/collectives/node';
import type { ElasticCoordinatorSettings } from '../config.js';

/**
 * `webshard-train --elastic-coordinator PORT`: hosts an elastic world's coordinator ([Note: elastic
 * membership] in collectives) until the job ends (every member of the world left) or fails (the
 * world stayed below `--min-world-size` for `--elastic-wait-seconds`: the error, then exit 1).
 * Members join with `webshard-train --elastic ws://HOST:PORT ...` (`WEBSHARD_TOKEN` on both sides
 * off loopback; `--browser-host` is the address it binds and announces).
 */
export async function hostElasticCoordinator(
  settings: ElasticCoordinatorSettings,
  host: string,
  say: (line: string) => void,
): Promise<void> {
  const waitMs = settings.waitSeconds * 1000;
  const coordinator = await ElasticCoordinator.start({
    port: settings.port,
    host,
    token: process.env.WEBSHARD_TOKEN ?? '',
    minWorldSize: settings.minWorldSize,
    maxWorldSize: settings.maxWorldSize,
    joinWindowMs: waitMs,
    belowMinTimeoutMs: waitMs,
  });
  say(
    `elastic coordinator: ${coordinator.url} (world size ${settings.minWorldSize} to ${settings.maxWorldSize}); members join with --elastic ${coordinator.url}`,
  );
  let told = 0;
  const toldWaiting = new Set<number>();
  const tell = () => {
    for (const id of coordinator.waiting) {
      if (!toldWaiting.has(id)) say(`elastic: member ${id} waits to be admitted at a sync point`);
      toldWaiting.add(id);
    }
    for (const change of coordinator.history.slice(told)) {
      say(
        `elastic: epoch ${change.epoch}, ${change.members.length} member(s) [${change.members.join(', ')}]${change.left.length > 0 ? `, left [${change.left.join(', ')}]` : ''}${change.joined.length > 0 ? `, joined [${change.joined.join(', ')}]` : ''}`,
      );
    }
    told = coordinator.history.length;
  };
  const ticker = setInterval(tell, 200);
  try {
    await coordinator.done;
    tell();
    say('elastic coordinator: every member left; the job is over');
  } finally {
    clearInterval(ticker);
    await coordinator.close();
  }
}
