import { ArgumentError } from '@webshard/tensor-core';
import type { LaunchOptions } from '../launcher/launcher.js';

/** The usage text of `webshard-run`. */
export const USAGE = `usage: webshard-run --nproc-per-node N [--nnodes M --node-rank K]
                    [--master-addr A] [--master-port P] [--token T] [--grace-ms MS]
                    [--no-node] script [args...]

Starts N ranks of script (node script, or node --import tsx for .ts) with torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and WEBSHARD_TOKEN.
When one rank fails, the others are stopped and webshard-run exits with its code.`;

const VALUED = new Set([
  'nproc-per-node',
  'nnodes',
  'node-rank',
  'master-addr',
  'master-port',
  'token',
  'grace-ms',
]);

function integer(flag: string, text: string): number {
  const value = Number(text);
  if (text === '' || !Number.isSafeInteger(value)) {
    throw new ArgumentError('webshard-run', `--${flag} needs an integer, got '${text}'`);
  }
  return value;
}

/**
 * Parses `webshard-run`'s arguments: options (`--flag value`, `--flag=value`, torchrun's
 * underscore spellings too) up to the script; everything after the script is the script's.
 * Returns `'help'` for `--help`.
 */
export function parseArgs(argv: readonly string[]): LaunchOptions | 'help' {
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
  const nproc = values.get('nproc-per-node');
  if (nproc === undefined) throw new ArgumentError('webshard-run', '--nproc-per-node is required');
  const options: LaunchOptions = {
    nprocPerNode: integer('nproc-per-node', nproc),
    script,
    args: argv.slice(index + 1),
  };
  if (noNode) options.noNode = true;
  const optional = (flag: string, apply: (text: string) => void) => {
    const text = values.get(flag);
    if (text !== undefined) apply(text);
  };
  optional('nnodes', (t) => (options.nnodes = integer('nnodes', t)));
  optional('node-rank', (t) => (options.nodeRank = integer('node-rank', t)));
  optional('master-addr', (t) => (options.masterAddr = t));
  optional('master-port', (t) => (options.masterPort = integer('master-port', t)));
  optional('token', (t) => (options.token = t));
  optional('grace-ms', (t) => (options.graceMs = integer('grace-ms', t)));
  return options;
}
