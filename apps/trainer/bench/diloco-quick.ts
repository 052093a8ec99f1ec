/**
 * The quick DiLoCo case of `pnpm bench` (a few minutes): the GPT 2x64 on 4 one-rank nodes, 100
 * steps, DDP against DiLoCo H = 50 in int8, int4 and topk over loopback (bench/diloco-runs.ts):
 * the bytes each rank sends per token (the codecs' encoded words as sent) against DDP's ring
 * volume, and the held-out loss at the end against DDP's. Then Streaming DiLoCo (rows with
 * `stream`: 5 fragments, an overlap of 10 steps, 300 steps; one process a rank over tcp, its
 * communication and the link shaper on a worker) in int8 and topk over loopback, broadband-20, broadband-100
 * and loopback again: tokens/s on each link against the mean of the two loopback runs, and the
 * share of the outer syncs' wall time the steps did not wait for, against plain DiLoCo int8 on
 * broadband-20; and int8 streamed with `--comm-progress thread` on broadband-20 against the
 * worker's run just before it (tokens/s and the syncs' wall time). The goals of issue 46: topk
 * at least 3000x fewer bytes than DDP, int8 at least 100x; on broadband-20 at least 0.95x
 * loopback's tokens/s streamed with topk, 0.9x with int8; 0.98x on broadband-100.
 * `WEBSHARD_BENCH_DILOCO=stream` runs the streamed part only; `bench:diloco` has the longer runs
 * (bench/diloco.ts).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BenchRow } from '@webshard/bench';
import {
  type DilocoShape,
  dilocoVariants,
  type Measured,
  measureDiloco,
  streamVariants,
} from './diloco-runs.js';

const SHAPE: DilocoShape = {
  ranks: 4,
  steps: 100,
  innerSteps: 50,
  batch: 16,
  block: 32,
  embd: 64,
  layers: 2,
};
/**
 * The streamed rows' job: 300 steps (6 periods of H), so the last step's sync of every fragment,
 * which no overlap hides (about 0.4 s for int8 on broadband-20), is not a tenth of the run as in
 * 100 steps (3 s on a quiet machine).
 */
const STREAM_SHAPE: DilocoShape = { ...SHAPE, steps: 300 };

/** The quick case's rows, named `diloco quick: DiLoCo H=50 <compression>[ stream ...], ...`. */
export async function dilocoQuickRows(): Promise<BenchRow[]> {
  // `WEBSHARD_BENCH_DILOCO=stream`: the streamed rows only (and plain int8 on broadband-20).
  const streamOnly = process.env.WEBSHARD_BENCH_DILOCO === 'stream';
  const dir = await mkdtemp(join(tmpdir(), 'webshard-diloco-quick-'));
  const described = (s: DilocoShape) =>
    `GPT ${s.layers}x${s.embd}, ${s.ranks} ranks, ${s.steps} steps`;
  const shape = described(SHAPE);
  const streamShape = described(STREAM_SHAPE);
  const rows: BenchRow[] = [];
  const say = (name: string, link: string, m: Measured) =>
    console.log(
      `diloco quick: ${name} over ${link}: ${m.bytesPerToken.toPrecision(4)} B/token, held-out loss ${m.heldOutLoss.toFixed(4)}, ${m.tokensPerSecond.toFixed(0)} tokens/s, syncs ${m.syncMs.toFixed(0)} ms, waited ${m.waitMs.toFixed(0)} ms (${m.parameters} parameters)`,
    );
  try {
    let ddp: Measured | null = null;
    const plain = dilocoVariants(SHAPE.innerSteps, ['int8', 'int4', 'topk']);
    const streamed = streamVariants(SHAPE.innerSteps, 5, 10, ['int8', 'topk']);
    const onLoopback = streamOnly ? [] : [...plain, ...streamed];
    for (const variant of onLoopback) {
      const m = await measureDiloco(dir, SHAPE, variant, 'none');
      say(variant.name, 'loopback', m);
      if (ddp === null) {
        ddp = m;
        continue;
      }
      rows.push(
        {
          name: `diloco quick: ${variant.name}, ${shape}, loopback, bytes each rank sends per token`,
          metric: 'bytes/token',
          value: Number(m.bytesPerToken.toPrecision(4)),
          unit: 'B',
          peer: 'DDP (ring volume)',
          peerValue: Number(ddp.bytesPerToken.toPrecision(6)),
        },
        {
          name: `diloco quick: ${variant.name}, ${shape}, loopback, held-out loss at the end`,
          metric: 'loss',
          value: Number(m.heldOutLoss.toFixed(4)),
          unit: 'nats',
          better: 'lower',
          peer: 'DDP',
          peerValue: Number(ddp.heldOutLoss.toFixed(4)),
        },
      );
    }
    // Each streamed variant over loopback, broadband-20 and broadband-100, back to back, and over
    // loopback again (the peer is the mean of the two: on a shared machine the load drifts);
    // plain int8 for the share hidden without streaming, and int8 streamed with its communication
    // on the ranks' threads, right after the worker's run, for what the worker brings.
    const plainInt8 = plain.find((v) => v.name.endsWith('int8'))!;
    const plainShaped = await measureDiloco(dir, STREAM_SHAPE, plainInt8, 'broadband-20');
    say(plainInt8.name, 'broadband-20', plainShaped);
    const hidden = (m: Measured) => Math.round(100 * (1 - m.waitMs / m.syncMs));
    const [onThread] = streamVariants(SHAPE.innerSteps, 5, 10, ['int8'], 'thread');
    for (const variant of streamed) {
      const before = await measureDiloco(dir, STREAM_SHAPE, variant, 'none');
      say(variant.name, 'loopback (before)', before);
      const shaped = new Map<string, Measured>();
      for (const link of ['broadband-20', 'broadband-100']) {
        const m = await measureDiloco(dir, STREAM_SHAPE, variant, link);
        say(variant.name, link, m);
        shaped.set(link, m);
        if (link === 'broadband-20' && variant === streamed[0]) {
          const thread = await measureDiloco(dir, STREAM_SHAPE, onThread!, link);
          say(onThread!.name, link, thread);
          rows.push({
            name: `diloco quick: ${onThread!.name}, ${streamShape}, ${link}`,
            metric: 'tokens/s',
            value: Math.round(thread.tokensPerSecond),
            unit: 'tokens/s',
            peer: `${variant.name} (on the communication worker) on ${link}`,
            peerValue: Math.round(m.tokensPerSecond),
          });
          // The wall time of the syncs (issue to average done, summed): what the worker saves
          // whatever the load, since on the rank's thread each hop waits for a step to end.
          rows.push({
            name: `diloco quick: ${onThread!.name}, ${streamShape}, ${link}, outer syncs' wall time`,
            metric: 'sync time',
            value: Math.round(thread.syncMs),
            unit: 'ms',
            better: 'lower',
            peer: `${variant.name} (on the communication worker) on ${link}`,
            peerValue: Math.round(m.syncMs),
          });
        }
      }
      const after = await measureDiloco(dir, STREAM_SHAPE, variant, 'none');
      say(variant.name, 'loopback (after)', after);
      const loopback = (before.tokensPerSecond + after.tokensPerSecond) / 2;
      for (const [link, m] of shaped) {
        rows.push(
          {
            name: `diloco quick: ${variant.name}, ${streamShape}, ${link}`,
            metric: 'tokens/s',
            value: Math.round(m.tokensPerSecond),
            unit: 'tokens/s',
            peer: `${variant.name} on loopback (mean of the runs before and after)`,
            peerValue: Math.round(loopback),
          },
          {
            name: `diloco quick: ${variant.name}, ${streamShape}, ${link}, share of the outer syncs' wall time hidden`,
            metric: 'hidden',
            value: hidden(m),
            unit: '%',
            better: 'higher',
            peer: `${plainInt8.name} (not streamed) on broadband-20`,
            peerValue: hidden(plainShaped),
          },
        );
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return rows;
}
