/**
 * DiLoCo against DDP across simulated internet links: the trainer's GPT on 4 ranks, each a node of
 * its own (bench/diloco-runs.ts), every link between them shaped by `WEBSHARD_LINK` (the presets
 * `broadband-20` and `broadband-100`, [Note: link presets] in @webshard/collectives) or left as
 * loopback. For `--strategy ddp` and `diloco --inner-steps 50` in f32, int8, int4 and topk, the
 * same steps, batches and seed: tokens/s over the whole run (the outer syncs included) against the
 * same strategy on loopback; bytes each rank sends per token the job trains against DDP's; the
 * held-out loss at the end against DDP's on loopback. Streaming DiLoCo (rows with `stream`:
 * `--outer-fragments 5 --outer-overlap 10` at H = 50, int8 and topk) beside them, and for every
 * DiLoCo row on a shaped link the share of its outer syncs' wall time the steps did not wait for
 * (the syncs before the last step: the last syncs every fragment and blocks in any case).
 * Run: `pnpm --filter @webshard/trainer bench:diloco` (`-- --steps 100 --n-embd 128` to change the
 * run, `-- --fragments 5 --overlap 10` for the streamed ones, `-- --variants stream` for DDP and
 * the variants whose name holds `stream`, `-- --links none` for loopback alone; `-- --quick` for
 * 50 steps on broadband-20 only). `pnpm bench` runs the loopback bytes rows
 * alone (bench/diloco-quick.ts).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BenchRow, writeBenchResults } from '@webshard/bench';
import {
  type DilocoShape,
  dilocoVariants,
  type Measured,
  measureDiloco,
  streamVariants,
} from './diloco-runs.js';

const quick = process.argv.includes('--quick');

function flag(name: string, fallback: number): number {
  const index = process.argv.indexOf(`--${name}`);
  return index >= 0 ? Number(process.argv[index + 1]) : fallback;
}

const SHAPE: DilocoShape = {
  ranks: 4,
  steps: flag('steps', quick ? 50 : 100),
  innerSteps: flag('inner-steps', 50),
  batch: flag('batch-size', 16),
  block: flag('block-size', 32),
  embd: flag('n-embd', 64),
  layers: flag('n-layer', 2),
};
const FRAGMENTS = flag('fragments', 5);
const OVERLAP = flag('overlap', Math.floor(SHAPE.innerSteps / FRAGMENTS));
const only = process.argv.indexOf('--variants');
const VARIANTS = [
  ...dilocoVariants(SHAPE.innerSteps, ['f32', 'int8', 'int4', 'topk']),
  ...streamVariants(SHAPE.innerSteps, FRAGMENTS, OVERLAP, ['int8', 'topk']),
].filter((v) => only < 0 || v.name === 'DDP' || v.name.includes(process.argv[only + 1]!));

const linksAt = process.argv.indexOf('--links');
const links =
  linksAt >= 0
    ? process.argv[linksAt + 1]!.split(',')
    : quick
      ? ['none', 'broadband-20']
      : ['none', 'broadband-100', 'broadband-20'];
const dir = await mkdtemp(join(tmpdir(), 'webshard-diloco-bench-'));
const rows: BenchRow[] = [];
const shape = `GPT ${SHAPE.layers}x${SHAPE.embd}, ${SHAPE.ranks} ranks, ${SHAPE.steps} steps of ${SHAPE.batch * SHAPE.block} tokens`;
try {
  const results = new Map<string, Measured>();
  for (const link of links) {
    for (const variant of VARIANTS) {
      const m = await measureDiloco(dir, SHAPE, variant, link);
      results.set(`${variant.name}|${link}`, m);
      console.log(
        `${variant.name} over ${link}: ${m.tokensPerSecond.toFixed(0)} tokens/s, ${m.bytesPerToken.toFixed(3)} B/token, held-out loss ${m.heldOutLoss.toFixed(4)}, syncs ${m.syncMs.toFixed(0)} ms, waited ${m.waitMs.toFixed(0)} ms (${m.parameters} parameters)`,
      );
    }
  }
  const ddpLoopback = results.get('DDP|none')!;
  for (const variant of VARIANTS) {
    const loopback = results.get(`${variant.name}|none`)!;
    rows.push({
      name: `diloco bench: ${variant.name}, ${shape}, loopback`,
      metric: 'tokens/s',
      value: Math.round(loopback.tokensPerSecond),
      unit: 'tokens/s',
    });
    for (const link of links.filter((l) => l !== 'none')) {
      const m = results.get(`${variant.name}|${link}`)!;
      rows.push({
        name: `diloco bench: ${variant.name}, ${shape}, ${link}`,
        metric: 'tokens/s',
        value: Math.round(m.tokensPerSecond),
        unit: 'tokens/s',
        peer: `${variant.name} on loopback`,
        peerValue: Math.round(loopback.tokensPerSecond),
      });
      if (variant.name !== 'DDP' && m.syncMs > 0) {
        rows.push({
          name: `diloco bench: ${variant.name}, ${shape}, ${link}, share of the outer syncs' wall time hidden`,
          metric: 'hidden',
          value: Math.round(100 * (1 - m.waitMs / m.syncMs)),
          unit: '%',
          better: 'higher',
        });
      }
    }
    rows.push({
      name: `diloco bench: ${variant.name}, ${shape}, bytes each rank sends per token`,
      metric: 'bytes/token',
      value: Number(loopback.bytesPerToken.toPrecision(4)),
      unit: 'B',
      ...(variant.name === 'DDP'
        ? {}
        : { peer: 'DDP (ring volume)', peerValue: Number(ddpLoopback.bytesPerToken.toFixed(2)) }),
    });
    rows.push({
      name: `diloco bench: ${variant.name}, ${shape}, held-out loss at the end (loopback)`,
      metric: 'loss',
      value: Number(loopback.heldOutLoss.toFixed(4)),
      unit: 'nats',
      better: 'lower',
      ...(variant.name === 'DDP'
        ? {}
        : { peer: 'DDP on loopback', peerValue: Number(ddpLoopback.heldOutLoss.toFixed(4)) }),
    });
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
writeBenchResults('trainer-diloco', rows);
