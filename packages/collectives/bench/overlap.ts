// Overlap of communication with a kernel that never yields (issue 48): a 2-rank tcp (or ws)
// all-reduce issued before the kernel and awaited after it, on the rank's thread against the
// communication worker, in one run, with the load beside them. Alone: `tsx bench/overlap.ts [MiB]
// [kernel iterations] [repetitions] [tcp|ws]`; index.ts adds its tcp rows to `pnpm bench` where
// tcp runs on 2 ranks.
import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchRow } from '@webshard/bench';
import { freePort } from '../src/launcher/launcher.js';
import { StoreServer } from '../src/rendezvous/store-server.js';

const here = dirname(fileURLToPath(import.meta.url));
const PATHS = ['thread', 'worker', 'worker-shared'] as const;
type OverlapPath = (typeof PATHS)[number];
const LABEL: Record<OverlapPath, string> = {
  thread: "on the rank's thread",
  worker: 'communication worker',
  'worker-shared': 'communication worker, shared buffer',
};

interface OverlapResult {
  kernel: number;
  alone: Record<OverlapPath, number>;
  overlapped: Record<OverlapPath, number>;
  exposed: Record<OverlapPath, number>;
  /** All-reduce alone of a few small sizes (bytes) per path, ms. */
  small: Record<string, Record<OverlapPath, number>>;
}

/** Two rank processes, each in two worlds (its thread's group, its worker's), rank 0's medians. */
async function runRanks(
  sizeMiB: number,
  iterations: number,
  repetitions: number,
  backend: 'tcp' | 'ws',
): Promise<OverlapResult> {
  const size = 2;
  // The rank's-thread world joins this store; the worker world's store is hosted by rank 0's
  // worker, on a free port.
  const server = new StoreServer({ port: 0, worldSize: size, token: 'overlap-bench' });
  const ports = [await server.listen(), await freePort()];
  try {
    const ranks = Array.from({ length: size }, (_, rank) => {
      const child = spawn(
        process.execPath,
        [
          '--conditions=@webshard/source',
          '--import',
          'tsx',
          join(here, 'overlap-rank.ts'),
          `ws://127.0.0.1:${ports[0]}`,
          String(ports[1]),
          String(rank),
          String(size),
          String(sizeMiB),
          String(iterations),
          String(repetitions),
          backend,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      let err = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
      return new Promise<OverlapResult | null>((resolve, reject) => {
        child.on('close', (code) => {
          if (code !== 0) return reject(new Error(`overlap rank ${rank} exited ${code}:\n${err}`));
          const line = out.split('\n').find((l) => l.startsWith('@@overlap '));
          resolve(line === undefined ? null : (JSON.parse(line.slice(10)) as OverlapResult));
        });
      });
    });
    return (await Promise.all(ranks))[0]!;
  } finally {
    await server.close();
  }
}

/**
 * The overlap rows: per path, issue + kernel + wait, and what that hides of the all-reduce alone
 * ((kernel + all-reduce - overlapped) / all-reduce); the kernel alone and the load beside them.
 */
export async function overlapRows(
  sizeMiB = 16,
  iterations = 20_000_000,
  repetitions = 7,
  backend: 'tcp' | 'ws' = 'tcp',
): Promise<BenchRow[]> {
  const name = `allReduce 2 ranks ${sizeMiB} MiB over ${backend}`;
  const ms = (value: number) => +value.toFixed(1);
  const rows: BenchRow[] = [
    {
      name: 'load average (1 min) before the overlap rows',
      metric: 'load',
      value: +loadavg()[0]!.toFixed(2),
      unit: 'load',
      better: 'lower',
    },
  ];
  console.log('overlap: thread and worker paths, interleaved...');
  const r = await runRanks(sizeMiB, iterations, repetitions, backend);
  rows.push({
    name: 'overlap: kernel alone (fixed work, never yields)',
    metric: 'time',
    value: ms(r.kernel),
    unit: 'ms',
  });
  for (const path of PATHS) {
    const hidden = (100 * (r.alone[path] - r.exposed[path])) / r.alone[path];
    rows.push(
      {
        name: `overlap: ${name} alone, ${LABEL[path]}`,
        metric: 'time',
        value: ms(r.alone[path]),
        unit: 'ms',
      },
      {
        name: `overlap: ${name} issued before the kernel, issue + kernel + wait, ${LABEL[path]}`,
        metric: 'time',
        value: ms(r.overlapped[path]),
        unit: 'ms',
      },
      {
        name: `overlap: ${name}, exposed: issue + wait after the kernel (same iteration), ${LABEL[path]}`,
        metric: 'time',
        value: ms(r.exposed[path]),
        unit: 'ms',
      },
      {
        name: `overlap: ${name}, communication hidden behind the kernel, ${LABEL[path]}`,
        metric: 'hidden',
        value: Math.round(hidden),
        unit: '%',
        better: 'higher',
      },
    );
  }
  for (const [bytes, byPath] of Object.entries(r.small)) {
    const n = Number(bytes);
    const label = n >= 1 << 20 ? `${n >> 20} MiB` : `${n >> 10} KiB`;
    for (const path of PATHS) {
      rows.push({
        name: `allReduce 2 ranks ${label} over ${backend} alone, ${LABEL[path]}`,
        metric: 'time',
        value: +byPath[path].toFixed(3),
        unit: 'ms',
      });
    }
  }
  rows.push({
    name: 'load average (1 min) after the overlap rows',
    metric: 'load',
    value: +loadavg()[0]!.toFixed(2),
    unit: 'load',
    better: 'lower',
  });
  return rows;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { formatTable } = await import('@webshard/bench');
  const [mib, iterations, repetitions] = process.argv.slice(2, 5).map(Number);
  const backend = process.argv[5] === 'ws' ? 'ws' : 'tcp';
  console.log(
    formatTable(await overlapRows(mib || 16, iterations || 20_000_000, repetitions || 7, backend)),
  );
}
