import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MemoryProgressHub } from '../progress/memory-progress-board.js';
import { attachProgressBoard, progressReportOf, silenceProgress } from '../progress/progress.js';
import { freePort } from '../launcher/launcher.js';
import { ProcessGroup } from '../process-group.js';
import type { Transport } from '../transport-contract.js';
import { LocalHub } from '../transports/local/local-transport.js';
import type { FaultPlan, FaultRankReport } from './fault-plan.js';
import { type FaultEnvironment, faultGroupOptions, runFaultRank } from './fault-rank.js';
import { createNetworkWorld } from './network-world.js';

const here = dirname(fileURLToPath(import.meta.url));
const REPORT_MARK = '@@fault-report ';

/**
 * A stopped rank in this process: its sends and receives never settle, its aborts go nowhere, and
 * it answers no progress poll, as a process under SIGSTOP (its deadline may still poll, to no
 * effect). Pending receives of the real transport still complete, as a kernel still buffers bytes.
 */
function freeze(transport: Transport): void {
  silenceProgress(transport);
  const never = () => new Promise<never>(() => {});
  const frozen = transport as { send: unknown; recv: unknown; abort: unknown };
  frozen.send = never;
  frozen.recv = never;
  frozen.abort = () => {};
}

function inProcessEnvironment(
  transport: Transport,
  hub: LocalHub | null,
  stopStore: () => void,
): FaultEnvironment {
  return {
    kill: () => {
      if (hub === null) throw new Error('ranks in this process cannot die over sockets');
      hub.kill(transport.rank);
    },
    stop: () => {
      freeze(transport);
      // Rank 0 hosts the rendezvous store: stopping it stops the store too.
      if (transport.rank === 0) stopStore();
    },
    closeSockets: () => {
      throw new Error('ranks in this process have no sockets of their own to close');
    },
  };
}

async function runRanks(
  transports: Transport[],
  plan: FaultPlan,
  hub: LocalHub | null,
  stopStore: () => void = () => {},
): Promise<(FaultRankReport | null)[]> {
  return Promise.all(
    transports.map(async (transport) => {
      const group = ProcessGroup.fromTransport(transport, faultGroupOptions(plan));
      const environment = inProcessEnvironment(transport, hub, stopStore);
      const report = await runFaultRank(group, plan, environment);
      // A survivor that leaves goes at once; the others stay until the run is judged.
      if (plan.leave && report !== null) await transport.close();
      return report;
    }),
  );
}

/** Resolves with `promise`'s value, or 'hang' after `limitMs`. */
function withLimit<T>(promise: Promise<T>, limitMs: number): Promise<T | 'hang'> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const limit = new Promise<'hang'>((resolve) => {
    timer = setTimeout(() => resolve('hang'), limitMs);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

/** Runs a plan of the `local`, `tcp` or `ws` world with every rank in this process. */
export async function runPlanInProcess(
  plan: FaultPlan,
  limitMs: number,
): Promise<(FaultRankReport | null)[] | 'hang'> {
  if (plan.world === 'local') {
    const hub = new LocalHub(plan.size);
    const progress = new MemoryProgressHub();
    for (const transport of hub.transports) {
      attachProgressBoard(
        transport,
        progress.board(transport.rank, () => progressReportOf(transport)),
      );
    }
    try {
      return await withLimit(runRanks(hub.transports, plan, hub), limitMs);
    } finally {
      await Promise.all(hub.transports.map((transport) => transport.close()));
    }
  }
  if (plan.world !== 'tcp' && plan.world !== 'ws')
    throw new Error(`${plan.world} is not in-process`);
  const world = await createNetworkWorld(plan.world, plan.size);
  try {
    return await withLimit(runRanks(world.transports, plan, null, world.stopStore), limitMs);
  } finally {
    await world.close();
  }
}

/**
 * Runs a plan of `tcp-processes` or `ws-processes`: each rank a child process (`fault-child.ts`)
 * joined through the torchrun environment. A rank that was stopped or cut off is killed once every
 * other rank has reported or exited; every child is killed at `limitMs`, and the run is a hang.
 */
export async function runPlanInChildren(
  plan: FaultPlan,
  limitMs: number,
): Promise<(FaultRankReport | null)[] | 'hang'> {
  const port = await freePort();
  const script = join(here, 'fault-child.ts');
  const children: ReturnType<typeof spawn>[] = [];
  let settled = 0;
  let hung = false;
  const settle = () => {
    if (++settled < plan.size - 1) return;
    // Every survivor has reported: release them, and kill what is left of the victim.
    for (const child of children) child.stdin?.end();
    children[plan.victim]?.kill('SIGKILL');
  };
  const timer = setTimeout(() => {
    hung = true;
    for (const child of children) child.kill('SIGKILL');
  }, limitMs);
  const ranks = Array.from({ length: plan.size }, (_, rank) => {
    const child = spawn(
      process.execPath,
      ['--conditions=@webshard/source', '--import', 'tsx', script, JSON.stringify(plan)],
      {
        stdio: ['pipe', 'pipe', 'pipe'],
        env: {
          ...process.env,
          RANK: String(rank),
          WORLD_SIZE: String(plan.size),
          LOCAL_RANK: String(rank),
          MASTER_ADDR: '127.0.0.1',
          MASTER_PORT: String(port),
          WEBSHARD_TOKEN: 'fault-token',
        },
      },
    );
    children.push(child);
    child.stdin.on('error', () => {});
    let out = '';
    let err = '';
    let counted = rank === plan.victim;
    const count = () => {
      if (counted) return;
      counted = true;
      settle();
    };
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes(REPORT_MARK)) count();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    return new Promise<FaultRankReport | null>((resolve) => {
      child.on('close', (code, signal) => {
        count();
        const line = out.split('\n').find((l) => l.startsWith(REPORT_MARK));
        if (line !== undefined) resolve(JSON.parse(line.slice(REPORT_MARK.length)));
        else if (rank === plan.victim) resolve(null);
        else {
          const how = `rank ${rank} exited ${code ?? signal} without a report`;
          resolve({
            rank,
            error: { name: 'NoReport', message: `${how}: ${err.slice(-2000)}` },
            elapsedMs: 0,
            failedAt: -1,
          });
        }
      });
    });
  });
  const reports = await Promise.all(ranks);
  clearTimeout(timer);
  return hung ? 'hang' : reports;
}

export { REPORT_MARK };
