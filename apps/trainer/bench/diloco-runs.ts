/**
 * One run of the trainer on 4 one-rank nodes (4 launchers on this machine, `webshard-run --nnodes
 * 4`; each rank a thread of its launcher, or for the streamed variants a process over tcp with its
 * communication on a worker), every link between them shaped by `WEBSHARD_LINK` (where the bytes
 * move) or left as loopback, for `bench:diloco`
 * and the quick DiLoCo rows of `pnpm bench`. DDP's bytes are the ring all-reduce's volume of its
 * gradients, 2 (n - 1) / n x 4 bytes a parameter a step (nominal); DiLoCo's are what its syncs
 * report (the JSONL's `outerBytesSent`, rank 0's: each codec's encoded words as sent, [Note:
 * compressed averaging] and [Note: averaging sparse contributions] in @webshard/diloco).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { freePort, launch } from '@webshard/collectives/node';

const CLI = join(import.meta.dirname, '..', 'src', 'cli.ts');

/** The job every variant trains. */
export interface DilocoShape {
  readonly ranks: number;
  readonly steps: number;
  readonly innerSteps: number;
  readonly batch: number;
  readonly block: number;
  readonly embd: number;
  readonly layers: number;
}

/** A strategy and its flags. */
export interface Variant {
  readonly name: string;
  readonly args: readonly string[];
  /**
   * How each node's rank runs: a thread of its launcher (default; the link shaped between the
   * nodes on the rank's thread), or a process of its own over tcp, whose communication runs on a
   * worker (`--comm-progress worker`, the link shaped there) or on its thread.
   */
  readonly ranksAs?: 'threads' | 'processes';
}

/** What one run measured. */
export interface Measured {
  tokensPerSecond: number;
  /**
   * Over the outer syncs before the last step (rank 0's): the ms from each sync's issue to its
   * average done, summed, and the ms its steps waited for them. The last step's sync of every
   * fragment blocks in any case and is left out.
   */
  syncMs: number;
  waitMs: number;
  /** Bytes one rank sent per token the job trained. */
  bytesPerToken: number;
  heldOutLoss: number;
  parameters: number;
}

/**
 * Streaming DiLoCo at H = `innerSteps` in `fragments` fragments with an overlap of `overlap` inner
 * steps, with each of `compressions`, one process a rank over tcp with its communication on a
 * worker (the trainer's default for a streamed run): names `DiLoCo H=50 int8 stream F=5 tau=10`;
 * with `progress` `thread`, on the rank's thread: names end with `, thread progress`.
 */
export function streamVariants(
  innerSteps: number,
  fragments: number,
  overlap: number,
  compressions: readonly string[],
  progress: 'worker' | 'thread' = 'worker',
): Variant[] {
  return compressions.map((compression) => ({
    name: `DiLoCo H=${innerSteps} ${compression} stream F=${fragments} tau=${overlap}${progress === 'thread' ? ', thread progress' : ''}`,
    args: [
      ...['--strategy', 'diloco', '--inner-steps', String(innerSteps)],
      ...['--outer-compression', compression],
      ...['--outer-fragments', String(fragments), '--outer-overlap', String(overlap)],
      ...['--comm-progress', progress],
    ],
    ranksAs: 'processes',
  }));
}

/** DDP, then DiLoCo at H = `innerSteps` with each of `compressions`. */
export function dilocoVariants(innerSteps: number, compressions: readonly string[]): Variant[] {
  return [
    { name: 'DDP', args: ['--strategy', 'ddp'] },
    ...compressions.map((compression) => ({
      name: `DiLoCo H=${innerSteps} ${compression}`,
      args: [
        ...['--strategy', 'diloco', '--inner-steps', String(innerSteps)],
        ...['--outer-compression', compression],
      ],
    })),
  ];
}

/** The first 4000 and the last 8000 characters a run printed. */
class Tail extends Writable {
  head = '';
  text = '';
  override _write(chunk: Buffer, _: BufferEncoding, done: () => void): void {
    if (this.head.length < 4000) this.head = (this.head + chunk.toString()).slice(0, 4000);
    this.text = (this.text + chunk.toString()).slice(-8000);
    done();
  }
}

/** One run of `variant` over `link` (`none`: loopback), its JSONL written under `dir`. */
export async function measureDiloco(
  dir: string,
  shape: DilocoShape,
  variant: Variant,
  link: string,
): Promise<Measured> {
  const log = join(dir, `${variant.name}-${link}.jsonl`.replace(/[^A-Za-z0-9.-]/g, '_'));
  const port = await freePort();
  const outs = Array.from({ length: shape.ranks }, () => new Tail());
  const args = [
    ...['--n-layer', String(shape.layers), '--n-embd', String(shape.embd)],
    ...['--block-size', String(shape.block), '--batch-size', String(shape.batch)],
    ...['--steps', String(shape.steps), '--sample-length', '0'],
    ...['--backend', 'cpu', '--transport', 'tcp', '--log-jsonl', log, ...variant.args],
  ];
  const results = await Promise.all(
    outs.map((out, node) =>
      launch({
        nprocPerNode: 1,
        nnodes: shape.ranks,
        nodeRank: node,
        masterPort: port,
        token: 'diloco-bench',
        script: CLI,
        args,
        ...(variant.ranksAs === 'processes'
          ? {
              ranksAs: 'processes' as const,
              env: { WEBSHARD_LINK: link, NODE_OPTIONS: '--conditions=@webshard/source' },
            }
          : {
              ranksAs: 'threads' as const,
              execArgv: ['--conditions=@webshard/source'],
              env: { WEBSHARD_LINK: link },
            }),
        stdout: out,
        stderr: out,
        forwardSignals: false,
      }),
    ),
  );
  if (results.some((r) => r.exitCode !== 0)) {
    throw new Error(`${variant.name} over ${link}:\n${outs.map((o) => o.text).join('\n---\n')}`);
  }
  const lines = (await readFile(log, 'utf8'))
    .trim()
    .split('\n')
    .map(
      (l) =>
        JSON.parse(l) as {
          step: number;
          seconds: number;
          outerBytesSent?: number;
          outerSyncMs?: number;
          outerWaitMs?: number;
        },
    );
  const before = lines.filter((l) => l.step < shape.steps);
  const tokensPerStep = shape.batch * shape.block;
  // The job's rate: the loop's wall clock at the last line, so what runs between steps (the loop's
  // own collectives at the steps that are not quiet) counts; the steps' own times left it out.
  const seconds = lines.at(-1)!.seconds;
  const text = outs[0]!.text;
  const parameters = Number(/model: gpt, (\d+) parameters/.exec(outs[0]!.head)?.[1] ?? Number.NaN);
  const heldOutLoss = Number(/held-out loss ([\d.]+)/.exec(text)?.[1] ?? Number.NaN);
  const tokens = shape.steps * tokensPerStep;
  const sent = variant.args.includes('ddp')
    ? shape.steps * ((2 * (shape.ranks - 1)) / shape.ranks) * 4 * parameters
    : lines.reduce((s, l) => s + (l.outerBytesSent ?? 0), 0);
  return {
    tokensPerSecond: tokens / seconds,
    syncMs: before.reduce((s, l) => s + (l.outerSyncMs ?? 0), 0),
    waitMs: before.reduce((s, l) => s + (l.outerWaitMs ?? 0), 0),
    bytesPerToken: sent / tokens,
    heldOutLoss,
    parameters,
  };
}
