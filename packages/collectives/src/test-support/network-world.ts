import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../launcher/launcher.js';
import { createNetworkTransport, type NetworkBackend } from '../connect-transport.js';
import type { Rendezvous } from '../rendezvous/rendezvous.js';
import { StoreClient } from '../rendezvous/store-client.js';
import { StoreServer } from '../rendezvous/store-server.js';
import { ProcessGroup } from '../process-group.js';
import {
  type RankReport,
  runSuiteJob,
  SUITE_GROUP_OPTIONS,
  type SuiteJob,
} from '../suites/suite.js';
import type { Transport } from '../transport-contract.js';
import type { ProgressMode } from '../init-process-group.js';

/** `size` ranks of a network transport in this process, over real sockets (tests, benchmarks). */
export interface NetworkWorld {
  readonly transports: Transport[];
  readonly stores: StoreClient[];
  readonly port: number;
  /**
   * Fault injection: the store stops reading every connection, as when the process of rank 0 (its
   * host) is stopped; its sockets stay open. Nothing resumes it but `close`.
   */
  stopStore(): void;
  close(): Promise<void>;
}

/** How the ranks of a test world connect. */
export interface WorldShape {
  /**
   * `ws` only: which ranks accept connections. The others behave as browsers do: they dial, and
   * pairs of them talk through the lowest listening rank.
   */
  listens?: (rank: number) => boolean;
  /** Every rank's budget for unclaimed messages per peer (`maxUnexpectedBytes`). */
  maxUnexpectedBytes?: number;
}

/** Starts a store and `size` transports of `backend` in this process. */
export async function createNetworkWorld(
  backend: NetworkBackend,
  size: number,
  token = 'test-token',
  shape: WorldShape = {},
): Promise<NetworkWorld> {
  const server = new StoreServer({ port: 0, worldSize: size, token });
  const port = await server.listen();
  const stores = await Promise.all(
    Array.from({ length: size }, (_, rank) =>
      StoreClient.connect({
        url: `ws://127.0.0.1:${port}`,
        rank,
        worldSize: size,
        token,
        timeoutMs: 10_000,
      }),
    ),
  );
  const transports = await Promise.all(
    stores.map((store) => {
      const joined: Rendezvous = {
        store,
        options: {
          rank: store.rank,
          worldSize: size,
          masterAddr: '127.0.0.1',
          masterPort: port,
          localRank: store.rank,
          token,
          timeoutMs: 10_000,
        },
        close: () => store.close(),
      };
      const listen = shape.listens?.(store.rank);
      const budget = shape.maxUnexpectedBytes;
      return createNetworkTransport(backend, joined, {
        ...(listen === undefined ? {} : { listen }),
        ...(budget === undefined ? {} : { maxUnexpectedBytes: budget }),
      });
    }),
  );
  return {
    transports,
    stores,
    port,
    stopStore() {
      // The server's connections are private: reached here, in a test helper, on purpose.
      const wss = (server as unknown as { wss?: { clients: Set<{ pause(): void }> } }).wss;
      for (const client of wss?.clients ?? []) client.pause();
    },
    async close() {
      await Promise.all(transports.map((transport) => transport.close()));
      await Promise.all(stores.map((store) => store.close()));
      await server.close();
    },
  };
}

/** Runs a suite job on `size` ranks in this process. */
export async function runJobInProcess(
  backend: NetworkBackend,
  size: number,
  job: SuiteJob,
  shape: WorldShape = {},
): Promise<RankReport[]> {
  const world = await createNetworkWorld(backend, size, 'test-token', shape);
  try {
    const groups = world.transports.map((t) => ProcessGroup.fromTransport(t, SUITE_GROUP_OPTIONS));
    return await Promise.all(
      groups.map((group) =>
        runSuiteJob(group, job, {
          die: () => {
            throw new Error('in-process ranks cannot die; run the kill scenario in children');
          },
        }),
      ),
    );
  } finally {
    await world.close();
  }
}

const here = dirname(fileURLToPath(import.meta.url));
const REPORT_MARK = '@@report ';

/**
 * Runs a suite job on `size` ranks as child processes (`node --import tsx`), joined through the
 * torchrun environment; a rank's `die()` is SIGKILL. Ranks that die report null. With
 * `relayed`, only rank 0 listens (ws): the other ranks pair up through it, as browsers would.
 * A rank that reported stays connected until every rank has reported or died (then its stdin is
 * closed): a survivor that left at once could otherwise be reported gone by a slower survivor in
 * place of the rank that died. With `survivors: 'leave'`, each rank closes and exits as soon as it
 * has reported, as a real job's ranks do: the test of blaming the right rank even then. With
 * `progress: 'worker'`, each rank's communication runs on its worker (`initProcessGroup`).
 */
export async function runJobInChildren(
  backend: NetworkBackend,
  size: number,
  job: SuiteJob,
  relayed = false,
  survivors: 'stay' | 'leave' = 'stay',
  progress: ProgressMode = 'thread',
): Promise<(RankReport | null)[]> {
  const port = await freePort();
  const script = join(here, 'network-rank.ts');
  let settled = 0;
  const children: ReturnType<typeof spawn>[] = [];
  const settle = () => {
    if (++settled === size) for (const child of children) child.stdin?.end();
  };
  const ranks = Array.from({ length: size }, (_, rank) => {
    const child = spawn(
      process.execPath,
      [
        '--conditions=@webshard/source',
        '--import',
        'tsx',
        script,
        backend,
        JSON.stringify(job),
        relayed ? 'relayed' : 'mesh',
        survivors,
        progress,
      ],
      {
        stdio: ['pipe', 'pipe', 'pipe'],
        env: {
          ...process.env,
          RANK: String(rank),
          WORLD_SIZE: String(size),
          LOCAL_RANK: String(rank),
          MASTER_ADDR: '127.0.0.1',
          MASTER_PORT: String(port),
          WEBSHARD_TOKEN: 'child-token',
        },
      },
    );
    children.push(child);
    child.stdin.on('error', () => {});
    let out = '';
    let err = '';
    let reported = false;
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (!reported && out.includes(REPORT_MARK)) {
        reported = true;
        settle();
      }
    });
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    return new Promise<RankReport | null>((resolve, reject) => {
      child.on('close', (code, signal) => {
        if (!reported) {
          reported = true;
          settle();
        }
        const line = out.split('\n').find((l) => l.startsWith(REPORT_MARK));
        if (line !== undefined) resolve(JSON.parse(line.slice(REPORT_MARK.length)) as RankReport);
        else if (signal === 'SIGKILL') resolve(null);
        else reject(new Error(`rank ${rank} exited ${code ?? signal} without a report:\n${err}`));
      });
    });
  });
  return Promise.all(ranks);
}

export { REPORT_MARK };
