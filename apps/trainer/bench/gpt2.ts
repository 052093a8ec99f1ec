/**
 * [Note: the GPT-2 124M bench rows]
 * GPT-2 small (12 layers, 12 heads, width 768, GPT-2's BPE padded to 50304 as nanoGPT, block 256,
 * batch 4 a rank) trained for 2 AdamW steps by the CLI on the CPU backend, once per strategy, each
 * in its own process (so its resident memory is its own): single, ddp and fsdp on 2 thread ranks
 * over shm; with `WEBSHARD_BENCH_GPT2=all` also fsdp on 4 and offload (each step is 4096 tokens at
 * 4 ranks: some 15 minutes more on the 2-core machine), and GPT-2 medium (24 layers, 16 heads,
 * width 1024: `GPT-2 350M` rows) with fsdp on 2 ranks (some 8 minutes, 16 GB of RSS). A case whose host memory is not free is
 * skipped, saying so. Rows: tokens/s at step 2 (step 1
 * builds the kernels and the caches), the allocator's peak a rank against the memory estimate
 * (16P/N + activations, [Note: the memory estimate]) and, for the sharded ones, against DDP's,
 * and resident memory a rank (the process's peak RSS over its thread ranks) against the
 * allocator's peak. About 5-7 minutes a case on the loaded 2-core machine, so only with
 * `WEBSHARD_BENCH_GPT2=1`: `pnpm bench` stays under 15 minutes without them.
 * `WEBSHARD_BENCH_GPT2_CASES` (parts of row names, `;` between) runs only the cases named.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { freemem, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchRow } from '@webshard/bench';
import { estimateBytes } from '../src/models/memory-estimate.js';
import { parseOptions } from '../src/cli/options.js';

/** The flags every row shares: GPT-2's tokens at nanoGPT's padded vocabulary, 2 steps. */
const SHARED_FLAGS = [
  ...['--block-size', '256', '--tokenizer', 'gpt2', '--vocab-size', '50304', '--backend', 'cpu'],
  ...['--steps', '2', '--sample-length', '0'],
];
/** GPT-2 small at the bench's size. */
export const GPT2_FLAGS = [
  ...['--n-layer', '12', '--n-head', '12', '--n-embd', '768'],
  ...SHARED_FLAGS,
];

/** A GPT-2 size: its flags, its row names' prefix, its parameters (wte tied, wpe at 256 rows). */
interface Gpt2Size {
  prefix: string;
  flags: string[];
  params: number;
}

function gpt2Params(layers: number, width: number): number {
  return 50304 * width + 256 * width + layers * (12 * width * width + 13 * width) + 2 * width;
}

const SMALL: Gpt2Size = { prefix: 'GPT-2 124M', flags: GPT2_FLAGS, params: gpt2Params(12, 768) };
const MEDIUM: Gpt2Size = {
  prefix: 'GPT-2 350M',
  flags: [...['--n-layer', '24', '--n-head', '16', '--n-embd', '1024'], ...SHARED_FLAGS],
  params: gpt2Params(24, 1024),
};
const GIB = 2 ** 30;

interface Gpt2Case {
  label: string;
  /** GPT-2 small unless given. */
  size?: Gpt2Size;
  /** Only with `WEBSHARD_BENCH_GPT2=all`. */
  all?: boolean;
  ranks: number;
  flags: string[];
  /** Host bytes the run needs free before it starts (measured RSS plus a margin). */
  needsFree: number;
}

const CASES: Gpt2Case[] = [
  { label: 'single', ranks: 1, flags: [], needsFree: 6 * GIB },
  { label: 'ddp 2 (shm)', ranks: 2, flags: ['--strategy', 'ddp'], needsFree: 11 * GIB },
  { label: 'fsdp 2 (shm)', ranks: 2, flags: ['--strategy', 'fsdp'], needsFree: 9 * GIB },
  {
    label: 'fsdp 4 (shm)',
    all: true,
    ranks: 4,
    flags: ['--strategy', 'fsdp'],
    needsFree: 12 * GIB,
  },
  { label: 'offload', all: true, ranks: 1, flags: ['--strategy', 'offload'], needsFree: 6 * GIB },
  {
    label: 'fsdp 2 (shm)',
    size: MEDIUM,
    all: true,
    ranks: 2,
    flags: ['--strategy', 'fsdp'],
    needsFree: 18 * GIB,
  },
];

/** Whether the case shards the model's 16 bytes a parameter over its ranks. */
const sharded = (label: string) => label.startsWith('fsdp');

interface Gpt2Run {
  label: string;
  size: Gpt2Size;
  ranks: number;
  tokensPerSecond: number;
  peakDevice: number;
  /** FSDP's registered memory (shards, full buffers, gradients) over shm: outside the allocator. */
  peakExternal: number;
  peakHostPerRank: number;
  estimate: number;
}

/** One case through the CLI in a child process; its last JSONL record, or null (why printed). */
function runCase(c: Gpt2Case, dir: string): Gpt2Run | null {
  const batch = String(4 * c.ranks);
  const size = c.size ?? SMALL;
  const argv = [...size.flags, '--batch-size', batch, '--world-size', String(c.ranks), ...c.flags];
  if (freemem() < c.needsFree) {
    console.log(
      `${size.prefix}, ${c.label}: skipped, ${(freemem() / GIB).toFixed(1)} GiB free of the ${c.needsFree / GIB} it needs`,
    );
    return null;
  }
  const log = join(dir, `${c.label.replace(/\W+/g, '-')}.jsonl`);
  const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
  const started = Date.now();
  const load = loadavg()[0]!.toFixed(1);
  const child = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--conditions=@webshard/source', cli, ...argv, '--log-jsonl', log],
    { encoding: 'utf8', timeout: 900_000, cwd: fileURLToPath(new URL('..', import.meta.url)) },
  );
  if (child.status !== 0) {
    console.log(`${size.prefix}, ${c.label}: exit ${child.status}\n${child.stderr}`);
    return null;
  }
  const last = JSON.parse(readFileSync(log, 'utf8').trim().split('\n').at(-1)!) as {
    tokensPerSecond: number;
    peakDeviceBytes: number;
    peakExternalBytes?: number;
    peakHostBytes: number;
    hostRanksPerProcess?: number;
  };
  const config = parseOptions([...argv], process.cwd());
  if (config === 'help') throw new Error('unreachable: --help');
  const run: Gpt2Run = {
    label: c.label,
    size,
    ranks: c.ranks,
    tokensPerSecond: last.tokensPerSecond,
    peakDevice: last.peakDeviceBytes,
    peakExternal: last.peakExternalBytes ?? 0,
    peakHostPerRank: last.peakHostBytes / (last.hostRanksPerProcess ?? 1),
    estimate: estimateBytes(config, 50304),
  };
  console.log(
    `${size.prefix}, ${c.label}: ${run.tokensPerSecond.toFixed(1)} tokens/s, allocator peak ${(run.peakDevice / GIB).toFixed(2)} GiB a rank, registered ${(run.peakExternal / GIB).toFixed(2)} (estimate ${(run.estimate / GIB).toFixed(2)}, ${sharded(c.label) ? '16P/N' : '16P'} ${((16 * size.params) / (sharded(c.label) ? c.ranks : 1) / GIB).toFixed(2)}), RSS ${(run.peakHostPerRank / GIB).toFixed(2)} GiB a rank; ${((Date.now() - started) / 1000).toFixed(0)} s, load average ${load} -> ${loadavg()[0]!.toFixed(1)}`,
  );
  return run;
}

/**
 * The `GPT-2 124M` rows ([Note: the GPT-2 124M bench rows]); cases that cannot run are skipped.
 * `all` adds fsdp on 4 ranks and offload.
 */
export function gpt2Rows(all: boolean): BenchRow[] {
  const dir = mkdtempSync(join(tmpdir(), 'webshard-gpt2-bench-'));
  const runs: Gpt2Run[] = [];
  try {
    // `WEBSHARD_BENCH_GPT2_CASES='124M, fsdp;offload'`: the cases whose row name has one of them.
    const only = process.env.WEBSHARD_BENCH_GPT2_CASES?.split(';');
    const name = (k: Gpt2Case) => `${(k.size ?? SMALL).prefix}, ${k.label}`;
    const chosen = CASES.filter((k) => all || !k.all).filter(
      (k) => only === undefined || only.some((part) => name(k).includes(part)),
    );
    for (const c of chosen) {
      const run = runCase(c, dir);
      if (run) runs.push(run);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const single = runs.find((r) => r.label === 'single' && r.size === SMALL);
  const ddp = runs.find((r) => r.label.startsWith('ddp') && r.size === SMALL);
  const rows: BenchRow[] = [];
  for (const r of runs) {
    const name = `${r.size.prefix}, ${r.label}`;
    // Peers of GPT-2 small's own runs only: a medium row stands against its estimate.
    const small = r.size === SMALL;
    rows.push({
      name,
      metric: 'throughput',
      value: r.tokensPerSecond,
      unit: 'tokens/s',
      ...(single && small && r !== single
        ? { peer: 'single', peerValue: single.tokensPerSecond }
        : {}),
    });
    rows.push({
      name,
      metric: 'allocator peak a rank',
      value: r.peakDevice / GIB,
      unit: 'GiB',
      peer: `${sharded(r.label) ? '16P/N + gathered units' : '16P'} + activations (estimate)`,
      peerValue: r.estimate / GIB,
    });
    if (r.peakExternal > 0) {
      // Over shm the shards live in registered memory: the two peaks together (an upper bound,
      // they need not fall at once) are what the estimate and an emulated limit cover.
      rows.push({
        name,
        metric: 'allocator + registered peaks a rank',
        value: (r.peakDevice + r.peakExternal) / GIB,
        unit: 'GiB',
        peer: 'the estimate',
        peerValue: r.estimate / GIB,
      });
    }
    if (ddp && small && r !== ddp && r.label !== 'single') {
      rows.push({
        name,
        metric: 'allocator peak a rank',
        value: r.peakDevice / GIB,
        unit: 'GiB',
        peer: 'ddp 2',
        peerValue: ddp.peakDevice / GIB,
      });
    }
    rows.push({
      name,
      metric: 'resident memory a rank',
      value: r.peakHostPerRank / GIB,
      unit: 'GiB',
      peer: 'allocator peak a rank',
      peerValue: r.peakDevice / GIB,
    });
  }
  return rows;
}
