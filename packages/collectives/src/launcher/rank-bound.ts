import { availableParallelism, totalmem } from 'node:os';
import { ArgumentError } from '@webshard/tensor-core';
import { ARENA_MAX_BYTES, arenaRegisteredStart, shmOffsets } from '../transports/shm/shm-layout.js';

/** How a node's ranks run (the launcher's `RanksAs`). */
type RanksAs = 'processes' | 'threads';

/**
 * The least memory one rank takes: a V8 isolate with its heap, the collectives' WASM kernels and
 * their buffers. A rank process that joins over tcp and runs a small all-reduce peaked at 96 MiB
 * resident here (`/usr/bin/time -f %M`, with tsx); a thread shares the launcher's code, not its
 * isolate. 64 MiB is the floor below which no rank runs, not what a training rank needs.
 */
export const RANK_MIN_BYTES = 64 << 20;

/** What bounds the ranks of one node: this machine's memory and cores. */
export interface Machine {
  readonly memoryBytes: number;
  readonly cores: number;
}

/** This machine (`os.totalmem`, `os.availableParallelism`). */
export function thisMachine(): Machine {
  return { memoryBytes: totalmem(), cores: availableParallelism() };
}

/**
 * Bytes of the shared-memory world of `size` thread ranks before any op runs: the byte rings (one
 * per ordered pair, as `createShmHandle` sizes them) and the arena's exchange slots; null when
 * the arena's slots alone pass its 2 GiB ceiling.
 */
export function shmWorldBytes(size: number): number | null {
  const pairs = Math.max(1, size * (size - 1));
  const capacity = Math.min(4 << 20, Math.max(64 << 10, Math.floor((64 << 20) / pairs)));
  const rings = shmOffsets(size, Math.floor(capacity / 64) * 64).total;
  const arena = arenaRegisteredStart(size, Math.max(64 * size, 1 << 20));
  return arena > ARENA_MAX_BYTES ? null : rings + arena;
}

function fits(size: number, ranksAs: RanksAs, machine: Machine): boolean {
  const ranks = size * RANK_MIN_BYTES;
  if (ranksAs === 'processes') return ranks <= machine.memoryBytes;
  const shm = shmWorldBytes(size);
  return shm !== null && ranks + shm <= machine.memoryBytes;
}

/** The most ranks of `ranksAs` one node of `machine` can start (at least 1). */
export function maxRanksPerNode(ranksAs: RanksAs, machine: Machine): number {
  let low = 1;
  let high = Math.max(1, Math.floor(machine.memoryBytes / RANK_MIN_BYTES));
  while (low < high) {
    const middle = Math.ceil((low + high) / 2);
    if (fits(middle, ranksAs, machine)) low = middle;
    else high = middle - 1;
  }
  return low;
}

const GiB = 1024 ** 3;

/**
 * [Note: how many ranks a node can run]
 * `--nproc-per-node 100000` used to start ranks until one died with a WebAssembly `RangeError`
 * stack (#33 item 6). Before anything starts, the launcher now refuses more ranks than this
 * machine's memory holds at `RANK_MIN_BYTES` each, and, for threads, the shared-memory world
 * too (its byte rings grow with the square of the ranks: 64 KiB per ordered pair past 32 ranks,
 * 1 GiB at 128; its arena's slots must fit 2 GiB). The message says the bound and why. Cores are
 * guidance, not a bound: more ranks than cores run (tests do), slower.
 */
export function checkRanksPerNode(nproc: number, ranksAs: RanksAs, machine = thisMachine()): void {
  const bound = maxRanksPerNode(ranksAs, machine);
  if (nproc <= bound) return;
  const memory = `${(machine.memoryBytes / GiB).toFixed(1)} GiB`;
  const why =
    ranksAs === 'processes'
      ? `${memory} of memory at ${RANK_MIN_BYTES >> 20} MiB per rank at the least`
      : `${memory} of memory at ${RANK_MIN_BYTES >> 20} MiB per rank at the least, plus their shared-memory world (its rings grow with the square of the ranks)`;
  throw new ArgumentError(
    'webshard-run',
    `--nproc-per-node ${nproc} is more ranks as ${ranksAs} than this machine can run: at most ${bound} (${why}); it has ${machine.cores} cores, so past ${machine.cores} ranks share them`,
  );
}
