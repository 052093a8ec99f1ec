import { ArgumentError } from '@webshard/tensor-core';
import type { LaunchOptions } from '../launcher/launcher.js';
import { type Env, fromEnv, NODE_SETTINGS, settingVariable } from '../rendezvous/cluster-env.js';

/** The usage text of `webshard-run`. */
export const USAGE = `usage: webshard-run --nproc-per-node N [--nnodes M --node-rank K]
                    [--ranks-as threads|processes] [--master-addr A] [--master-port P]
                    [--token T] [--grace-ms MS] [--no-node] [--browser-ranks K]
                    script [args...]

Starts N ranks of script with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and WEBSHARD_TOKEN. The ranks are worker threads over shared memory
(initProcessGroup() joins it, and with several nodes the other nodes' ranks over tcp, running
collectives in two levels); with --ranks-as processes, or --no-node, they are processes (node
script, or node --import tsx for .ts). When one rank fails, the others are stopped and
webshard-run exits with its code.

Flags not given come from Kubernetes training operators' PET_NNODES, PET_NODE_RANK,
PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT, or from Slurm (SLURM_NNODES, SLURM_NODEID,
the first host of SLURM_JOB_NODELIST; one webshard-run per node); MASTER_ADDR and MASTER_PORT
win over both.

--browser-ranks K: K browser tabs join as the last ranks (WORLD_SIZE is N + K; the ranks run as
processes and must call initProcessGroup({ backend: 'ws' })); webshard-run prints the join URL
and token that a page passes to connectBrowserRank. The tabs reach MASTER_ADDR (127.0.0.1 by
default: this machine only).`;

const VALUED = new Set([
  'nproc-per-node',
  'nnodes',
  'node-rank',
  'master-addr',
  'master-port',
  'token',
  'grace-ms',
  'ranks-as',
  'browser-ranks',
]);

function integer(flag: string, text: string): number {
  const value = Number(text);
  if (text === '' || !Number.isSafeInteger(value)) {
    throw new ArgumentError('webshard-run', `--${flag} needs an integer, got '${text}'`);
  }
  return value;
}

/**
 * Under Slurm the node's rank is `SLURM_NODEID`, shared by every task of a node: several
 * launchers on one node would start the same ranks twice, so that is refused.
 */
function checkOneLauncherPerNode(env: Env, nodeRankFlag: string | undefined): void {
  if (nodeRankFlag !== undefined) return;
  if (settingVariable(NODE_SETTINGS.nodeRank, env) !== 'SLURM_NODEID') return;
  const tasks = env.SLURM_NTASKS;
  const nodes = env.SLURM_NNODES ?? env.SLURM_JOB_NUM_NODES;
  if (tasks !== undefined && nodes !== undefined && tasks !== nodes) {
    throw new ArgumentError(
      'webshard-run',
      `Slurm started ${tasks} tasks on ${nodes} nodes: run one webshard-run per node (srun --ntasks-per-node=1), or pass --node-rank`,
    );
  }
}

/**
 * Parses `webshard-run`'s arguments: options (`--flag value`, `--flag=value`, torchrun's
 * underscore spellings too) up to the script; everything after the script is the script's. Flags
 * not given are read from `env` ([Note: where ranks learn their place] in
 * rendezvous/cluster-env.ts). Ranks run as threads (as processes with `--no-node`) unless
 * `--ranks-as` says. Returns `'help'` for `--help`.
 */
export function parseArgs(argv: readonly string[], env: Env = process.env): LaunchOptions | 'help' {
  const values = new Map<string, string>();
  let noNode = false;
  let index = 0;
  while (index < argv.length) {
    const arg = argv[index]!;
    if (arg === '--') {
      index++;
      break;
    }
    if (!arg.startsWith('--')) break;
    const [rawName, inline] = arg.slice(2).split(/=(.*)/s, 2) as [string, string | undefined];
    const name = rawName.replaceAll('_', '-');
    index++;
    if (name === 'help') return 'help';
    if (name === 'no-node' || name === 'no-python') {
      noNode = true;
      continue;
    }
    if (!VALUED.has(name)) throw new ArgumentError('webshard-run', `unknown option --${name}`);
    const value = inline ?? argv[index++];
    if (value === undefined) throw new ArgumentError('webshard-run', `--${name} needs a value`);
    values.set(name, value);
  }
  const script = argv[index];
  if (script === undefined) throw new ArgumentError('webshard-run', 'no script given');
  const flag = <T>(name: string, parse: (text: string) => T): T | undefined => {
    const text = values.get(name);
    return text === undefined ? undefined : parse(text);
  };
  const op = 'webshard-run';
  const nproc = fromEnv(
    flag('nproc-per-node', (t) => integer('nproc-per-node', t)),
    NODE_SETTINGS.nprocPerNode,
    env,
    op,
  );
  if (nproc === undefined) {
    throw new ArgumentError('webshard-run', '--nproc-per-node is required (or PET_NPROC_PER_NODE)');
  }
  checkOneLauncherPerNode(env, values.get('node-rank'));
  const options: LaunchOptions = { nprocPerNode: nproc, script, args: argv.slice(index + 1) };
  if (noNode) options.noNode = true;
  const nnodes = fromEnv(
    flag('nnodes', (t) => integer('nnodes', t)),
    NODE_SETTINGS.nnodes,
    env,
    op,
  );
  if (nnodes !== undefined) options.nnodes = nnodes;
  const nodeRank = fromEnv(
    flag('node-rank', (t) => integer('node-rank', t)),
    NODE_SETTINGS.nodeRank,
    env,
    op,
  );
  if (nodeRank !== undefined) options.nodeRank = nodeRank;
  const masterAddr = fromEnv(values.get('master-addr'), NODE_SETTINGS.masterAddr, env, op);
  if (masterAddr !== undefined) options.masterAddr = masterAddr;
  const masterPort = fromEnv(
    flag('master-port', (t) => integer('master-port', t)),
    NODE_SETTINGS.masterPort,
    env,
    op,
  );
  if (masterPort !== undefined) options.masterPort = masterPort;
  const token = values.get('token');
  if (token !== undefined) options.token = token;
  const graceMs = flag('grace-ms', (t) => integer('grace-ms', t));
  if (graceMs !== undefined) options.graceMs = graceMs;
  const ranksAs = values.get('ranks-as');
  if (ranksAs !== undefined && ranksAs !== 'threads' && ranksAs !== 'processes') {
    throw new ArgumentError(
      'webshard-run',
      `--ranks-as must be threads or processes, got '${ranksAs}'`,
    );
  }
  const browserRanks = flag('browser-ranks', (t) => integer('browser-ranks', t));
  if (browserRanks !== undefined) options.browserRanks = browserRanks;
  // Tabs cannot join a world of threads: with browser ranks, processes unless told otherwise
  // (which launch() then refuses by name).
  options.ranksAs = ranksAs ?? (noNode || (browserRanks ?? 0) > 0 ? 'processes' : 'threads');
  return options;
}
