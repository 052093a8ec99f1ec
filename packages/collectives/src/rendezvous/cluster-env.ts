import { ArgumentError } from '@webshard/tensor-core';
import { expandSlurmHostlist } from './slurm-hostlist.js';

/**
 * [Note: where ranks learn their place]
 * A rank or a launcher takes each setting from the first of these that has it:
 * 1. what the caller passes (`initProcessGroup` options; `webshard-run` flags);
 * 2. torchrun's variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`), which
 *    `webshard-run` itself sets for its ranks, so a rank it started never reads a scheduler's;
 * 3. the variables Kubernetes training operators set for torchrun (`PET_NNODES`, `PET_NODE_RANK`,
 *    `PET_NPROC_PER_NODE`, `PET_MASTER_ADDR`, `PET_MASTER_PORT`), then Slurm's (`SLURM_PROCID`,
 *    `SLURM_NTASKS`, `SLURM_LOCALID`, `SLURM_NODEID`, `SLURM_NNODES`, and the first host of
 *    `SLURM_JOB_NODELIST` as the store's host).
 * Each setting is resolved on its own, as torch's users expect (an sbatch script that exports
 * `MASTER_ADDR` and lets `srun` give `SLURM_PROCID`). A variable is read only when nothing above
 * it gave the setting, and a bad value is an `ArgumentError` naming the variable, never a guess
 * or a hang: an elastic range (`PET_NNODES=1:4`) or `PET_NPROC_PER_NODE=auto` included.
 * A rank reads the per-rank variables (Slurm's tasks are ranks when `srun` starts the script
 * itself); `webshard-run` reads the per-node ones (one launcher per node: `srun
 * --ntasks-per-node=1`, or one pod per node).
 */
export type Env = Record<string, string | undefined>;

/** The environment of this process; empty where there is none (browsers). */
export function processEnv(): Env {
  return typeof process === 'undefined' ? {} : (process.env as Env);
}

/** A setting and the variables it is read from, in precedence order (torchrun's first). */
export interface EnvSetting<T> {
  readonly variables: readonly string[];
  readonly parse: (variable: string, text: string, op: string) => T;
}

function nonNegative(variable: string, text: string, op: string): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value)) {
    throw new ArgumentError(op, `${variable} must be a non-negative integer, got '${text}'`);
  }
  return value;
}

function positive(variable: string, text: string, op: string): number {
  const value = nonNegative(variable, text, op);
  if (value < 1) throw new ArgumentError(op, `${variable} must be at least 1, got '${text}'`);
  return value;
}

function port(variable: string, text: string, op: string): number {
  const value = nonNegative(variable, text, op);
  if (value > 65535)
    throw new ArgumentError(op, `${variable} must be a port (0-65535), got '${text}'`);
  return value;
}

/** `N` or torchrun's `N:N`; an elastic range `MIN:MAX` with MIN < MAX is refused. */
function nodeCount(variable: string, text: string, op: string): number {
  const match = /^(\d+):(\d+)$/.exec(text);
  if (match === null) return positive(variable, text, op);
  if (match[1] !== match[2]) {
    throw new ArgumentError(
      op,
      `${variable}='${text}' is an elastic range; webshard-run needs a fixed node count`,
    );
  }
  return positive(variable, match[1]!, op);
}

function host(variable: string, text: string, op: string): string {
  return variable.includes('NODELIST') ? expandSlurmHostlist(text, variable, op)[0]! : text;
}

/** The settings a rank reads (see [Note: where ranks learn their place]). */
export const RANK_SETTINGS = {
  rank: { variables: ['RANK', 'SLURM_PROCID'], parse: nonNegative },
  worldSize: { variables: ['WORLD_SIZE', 'SLURM_NTASKS'], parse: positive },
  localRank: { variables: ['LOCAL_RANK', 'SLURM_LOCALID'], parse: nonNegative },
  masterAddr: {
    variables: ['MASTER_ADDR', 'PET_MASTER_ADDR', 'SLURM_JOB_NODELIST', 'SLURM_NODELIST'],
    parse: host,
  },
  masterPort: { variables: ['MASTER_PORT', 'PET_MASTER_PORT'], parse: port },
} as const satisfies Record<string, EnvSetting<unknown>>;

/** The settings a launcher (one per node) reads. */
export const NODE_SETTINGS = {
  nnodes: {
    variables: ['PET_NNODES', 'SLURM_NNODES', 'SLURM_JOB_NUM_NODES'],
    parse: nodeCount,
  },
  nodeRank: { variables: ['PET_NODE_RANK', 'SLURM_NODEID'], parse: nonNegative },
  nprocPerNode: { variables: ['PET_NPROC_PER_NODE'], parse: positive },
  masterAddr: RANK_SETTINGS.masterAddr,
  masterPort: RANK_SETTINGS.masterPort,
} as const satisfies Record<string, EnvSetting<unknown>>;

/** The variable of `setting` that `env` sets (non-empty), first in precedence; undefined if none. */
export function settingVariable(setting: EnvSetting<unknown>, env: Env): string | undefined {
  return setting.variables.find((name) => env[name] !== undefined && env[name] !== '');
}

/**
 * `explicit` when given; else the first variable of `setting` that `env` sets, parsed (a bad
 * value is an `ArgumentError` of `op` naming it); else undefined.
 */
export function fromEnv<T>(
  explicit: T | undefined,
  setting: EnvSetting<T>,
  env: Env,
  op: string,
): T | undefined {
  if (explicit !== undefined) return explicit;
  const variable = settingVariable(setting, env);
  return variable === undefined ? undefined : setting.parse(variable, env[variable]!, op);
}
