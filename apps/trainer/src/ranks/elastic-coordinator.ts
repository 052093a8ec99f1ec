import { ElasticCoordinator } from '@webshard/collectives/node';
import type { ElasticCoordinatorSettings, TrainConfig } from '../config.js';
import { DEFAULT_CORPUS_PATH } from '../corpus.js';
import { type PageServer, servePage } from './browser-job.js';
import { readTlsFiles, type TlsFiles } from './tls-files.js';

/*
 * [Note: browser tabs in an elastic world]
 * `--elastic-coordinator PORT --browser-port P` also serves the page a tab opens to join the
 * world (./browser-job.ts, as for `--browser-ranks`), at `http://HOST:P/#token=...`. Its
 * `/job.json` holds the coordinator's own training flags with `--elastic` set to the
 * coordinator's URL and `elastic: true`, so the tab runs `trainElastic` over `ws` as one more
 * member ([Note: elastic training in the trainer]): admitted at the next sync point with rank 0's
 * state, dropped at the next sync when its tab closes. A tab cannot listen, so it reaches the
 * others through a Node member's `ws` listener ([Note: ws connections] in collectives): the Node
 * members join with `--transport ws`, and a world of tabs alone cannot form. What a tab cannot do
 * (files, fsdp's checkpoints, 16-bit precision) is refused on the coordinator's command line
 * (cli/elastic-page-options.ts). Without TLS flags the page is served over plain http: off
 * loopback the tab is no secure context (no WebGPU; give `--backend cpu`) and the token travels in
 * cleartext; with `--tls-cert` and `--tls-key` it is https and every link wss ([Note: an elastic
 * job over the internet] in ../cli/tls-options.ts).
 */

/** The page tabs open, serving the coordinator's training flags as an elastic member's job. */
function serveTabPage(
  config: TrainConfig,
  url: string,
  memberTimeoutSeconds: number,
  tls: TlsFiles,
): Promise<PageServer> {
  const data = config.model === 'gpt' ? (config.data ?? DEFAULT_CORPUS_PATH) : null;
  const job = {
    // A tab reads no files and cannot listen: it trusts its browser's store and dials out.
    config: {
      ...{ ...config, data, elastic: url, elasticCoordinator: null, transport: 'ws' as const },
      ...{ tls: null, noListen: false },
    },
    join: url,
    elastic: true,
    memberTimeoutSeconds,
    // The tab shapes its links as the Node members do: [Note: the link shaper] in collectives.
    ...(process.env.WEBSHARD_LINK ? { link: process.env.WEBSHARD_LINK } : {}),
  };
  const secure = tls.cert !== undefined && tls.key !== undefined;
  return servePage(job, data, {
    host: config.browserHost,
    port: config.browserPort,
    ...(secure ? { tls: { cert: tls.cert!, key: tls.key! } } : {}),
  });
}

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
  tabs: TrainConfig | null = null,
): Promise<void> {
  const waitMs = settings.waitSeconds * 1000;
  const token = process.env.WEBSHARD_TOKEN ?? '';
  const tls = tabs?.tls ? await readTlsFiles(tabs.tls) : {};
  const secure = tls.cert !== undefined && tls.key !== undefined;
  let told = 0;
  const toldWaiting = new Set<number>();
  const coordinator = await ElasticCoordinator.start({
    port: settings.port,
    host,
    token,
    minWorldSize: settings.minWorldSize,
    maxWorldSize: settings.maxWorldSize,
    joinWindowMs: waitMs,
    belowMinTimeoutMs: waitMs,
    memberTimeoutMs: settings.memberTimeoutSeconds * 1000,
    syncTimeoutMs: settings.syncTimeoutSeconds * 1000,
    ...(settings.statePath === null ? {} : { statePath: settings.statePath }),
    ...(secure ? { tls: { cert: tls.cert!, key: tls.key! } } : {}),
    // Each change is printed as it is announced, before any member trains in it (the ticker below
    // would print it up to a tick later, after the members' first lines of the new epoch).
    onEpoch: () => tell(),
  });
  say(
    `elastic coordinator: ${coordinator.url} (world size ${settings.minWorldSize} to ${settings.maxWorldSize}); members join with --elastic ${coordinator.url}`,
  );
  if (coordinator.epoch >= 0) {
    say(
      `elastic: epoch ${coordinator.epoch} [${coordinator.memberIds.join(', ')}] taken back from ${settings.statePath}; its members resume (those not back within --member-timeout are dropped)`,
    );
  }
  const page =
    settings.page && tabs !== null
      ? await serveTabPage(tabs, coordinator.url, settings.memberTimeoutSeconds, tls)
      : null;
  if (page !== null) {
    const at = host.includes(':') ? `[${host}]` : host;
    say(
      `elastic: browser tabs join at ${secure ? 'https' : 'http'}://${at}:${page.port}/#token=${token} (each tab a member, training with this command's flags)`,
    );
  }
  function tell(): void {
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
  }
  const ticker = setInterval(tell, 200);
  try {
    await coordinator.done;
    tell();
    say('elastic coordinator: every member left; the job is over');
  } finally {
    clearInterval(ticker);
    await page?.close();
    await coordinator.close();
  }
}
