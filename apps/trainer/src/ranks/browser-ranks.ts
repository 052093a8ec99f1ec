import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { initProcessGroup } from '@webshard/collectives';
import { freePort } from '@webshard/collectives/node';
import type { TrainConfig } from '../config.js';
import { DEFAULT_CORPUS_PATH } from '../corpus.js';
import { UsageError } from '../errors.js';
import { train } from '../train.js';
import { browserAddresses } from './browser-address.js';
import { type PageListen, servePage } from './browser-job.js';
import type { RankIO, RanksOutcome } from './rank-io.js';

/** How long the Node ranks wait for every tab to join (the user has to open them). */
export const BROWSER_JOIN_MS = 600_000;

/** Where the Node ranks' store listens and the token they share, for the launcher. */
export interface NodeRanksPlan {
  nprocPerNode: number;
  masterAddr: string;
  masterPort: number;
  token: string;
}

/**
 * [Note: browser tabs as ranks]
 * `--browser-ranks k` makes the last k of `--world-size W` ranks browser tabs. This process picks
 * the store's port and a join token, serves the page (./browser-job.ts) on 127.0.0.1 and prints
 * its address, `http://127.0.0.1:port/#token=...`, to open in k tabs. The first `W - k` ranks
 * are Node: with one, it is this process (so its summary comes back to `main`); with more, they
 * are processes of the launcher, as for `--transport ws`, whose children count the tabs in their
 * world (`WORLD_SIZE + k`). Rank 0 hosts the store, and each tab claims a free rank of the join
 * URL from it (`connectBrowserRank`), so a tab never needs to know its rank; the Node ranks wait
 * `BROWSER_JOIN_MS` for the tabs to join. A tab runs train.ts as any rank does, bundled for the
 * browser ([Note: the trainer's platform module]), on the backend the same rule picks ([Note: the
 * trainer's default backend]); its traffic with other tabs goes through rank 0's relay. A tab
 * closed mid-run is a lost peer: every Node rank's next collective fails naming it.
 *
 * [Note: browser tabs on other machines]
 * `--browser-host H` (default 127.0.0.1) is the one address tabs reach this machine at, and the
 * run uses it for everything a tab dials: the page server listens on H, H is the Node ranks'
 * `MASTER_ADDR` (so the store binds there), and the Node ranks' `ws` listeners bind to and
 * advertise their address toward it, which is H itself. An address that means every interface
 * (0.0.0.0) is refused: the tabs could not dial it. With `WEBSHARD_TLS_CERT` and `WEBSHARD_TLS_KEY`
 * the page is served over https with that certificate and every connection is `wss://` (the ws
 * transport's TLS, which the Node ranks read from the same variables); without them, on an
 * address other than loopback, the run warns that the page, the token and the gradients travel in
 * cleartext, and that a page from http://H is no secure context, so its tab has no WebGPU.
 */
export async function runWithBrowserRanks(
  config: TrainConfig,
  io: RankIO,
  groupTimeoutMs: number,
  launchNodeRanks: (plan: NodeRanksPlan) => Promise<RanksOutcome>,
): Promise<RanksOutcome> {
  const k = config.browserRanks;
  const nodeRanks = config.worldSize - k;
  const host = config.browserHost;
  const masterPort = await freePort();
  const token = randomBytes(24).toString('hex');
  const tabRanks = Array.from({ length: k }, (_, i) => nodeRanks + i);
  const tls = await tlsFiles();
  const listen: PageListen = { host, port: config.browserPort, ...(tls ? { tls } : {}) };
  const addresses = (pagePort: number) =>
    browserAddresses({
      host,
      pagePort,
      masterPort,
      worldSize: config.worldSize,
      tabRanks,
      token,
      tls: tls !== undefined,
    });
  const { join } = addresses(0);
  const dataPath = config.model === 'gpt' ? (config.data ?? DEFAULT_CORPUS_PATH) : null;
  const page = await servePage({ config: { ...config, data: dataPath }, join }, dataPath, listen);
  const { message, warnings } = addresses(page.port);
  for (const warning of warnings) io.stderr(`${warning}\n`);
  io.stdout(`${message}; waiting ${BROWSER_JOIN_MS / 1000} s for them\n`);
  try {
    if (nodeRanks > 1) {
      return await launchNodeRanks({
        nprocPerNode: nodeRanks,
        masterAddr: host,
        masterPort,
        token,
      });
    }
    const group = await initProcessGroup({
      backend: 'ws',
      rank: 0,
      worldSize: config.worldSize,
      masterAddr: host,
      masterPort,
      token,
      timeoutMs: BROWSER_JOIN_MS,
      group: { timeoutMs: groupTimeoutMs },
    });
    try {
      return { ok: true, summary: await train(config, io, group) };
    } catch (error) {
      group.abort(`rank 0 failed: ${(error as Error).message}`);
      return { ok: false, exitCode: UsageError.isInstance(error) ? 2 : 1, error, rank: 0 };
    } finally {
      await group.close();
    }
  } finally {
    await page.close();
  }
}

/** The certificate and key named by `WEBSHARD_TLS_CERT` and `WEBSHARD_TLS_KEY`, when both are set. */
async function tlsFiles(): Promise<{ cert: Buffer; key: Buffer } | undefined> {
  const { WEBSHARD_TLS_CERT: cert, WEBSHARD_TLS_KEY: key } = process.env;
  if (!cert || !key) return undefined;
  return { cert: await readFile(cert), key: await readFile(key) };
}
