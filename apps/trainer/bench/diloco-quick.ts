/**
 * The quick DiLoCo case of `pnpm bench` (a few minutes): the GPT 2x64 on 4 one-rank nodes over
 * loopback, 100 steps, DDP against DiLoCo H = 50 in int8, int4 and topk (bench/diloco-runs.ts):
 * the bytes each rank sends per token (the codecs' encoded words as sent) against DDP's ring
 * volume, and the held-out loss at the end against DDP's. The goals of issue 46: topk at least
 * 3000x fewer bytes than DDP, int8 at least 100x. Tokens/s across shaped links are
 * `bench:diloco`'s (bench/diloco.ts), minutes more.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BenchRow } from '@webshard/bench';
import { type DilocoShape, dilocoVariants, type Measured, measureDiloco } from './diloco-runs.js';

const SHAPE: DilocoShape = {
  ranks: 4,
  steps: 100,
  innerSteps: 50,
  batch: 16,
  block: 32,
  embd: 64,
  layers: 2,
};

/** The quick case's rows, named `diloco quick: DiLoCo H=50 <compression>, ...`. */
export async function dilocoQuickRows(): Promise<BenchRow[]> {
  const dir = await mkdtemp(join(tmpdir(), 'webshard-diloco-quick-'));
  const shape = `GPT ${SHAPE.layers}x${SHAPE.embd}, ${SHAPE.ranks} ranks, ${SHAPE.steps} steps, loopback`;
  const rows: BenchRow[] = [];
  try {
    let ddp: Measured | null = null;
    for (const variant of dilocoVariants(SHAPE.innerSteps, ['int8', 'int4', 'topk'])) {
      const m = await measureDiloco(dir, SHAPE, variant, 'none');
      console.log(
        `diloco quick: ${variant.name}: ${m.bytesPerToken.toPrecision(4)} B/token, held-out loss ${m.heldOutLoss.toFixed(4)}, ${m.tokensPerSecond.toFixed(0)} tokens/s (${m.parameters} parameters)`,
      );
      if (ddp === null) {
        ddp = m;
        continue;
      }
      rows.push(
        {
          name: `diloco quick: ${variant.name}, ${shape}, bytes each rank sends per token`,
          metric: 'bytes/token',
          value: Number(m.bytesPerToken.toPrecision(4)),
          unit: 'B',
          peer: 'DDP (ring volume)',
          peerValue: Number(ddp.bytesPerToken.toPrecision(6)),
        },
        {
          name: `diloco quick: ${variant.name}, ${shape}, held-out loss at the end`,
          metric: 'loss',
          value: Number(m.heldOutLoss.toFixed(4)),
          unit: 'nats',
          better: 'lower',
          peer: 'DDP',
          peerValue: Number(ddp.heldOutLoss.toFixed(4)),
        },
      );
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return rows;
}
