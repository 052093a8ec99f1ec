/**
 * GPT-2 trained by volunteers: `--strategy diloco --elastic` (H inner steps; GPT-2's syncs topk,
 * SparseLoCo's, by default, the tiny GPT's int8) by 2 Node members and a headless Chromium tab,
 * every link shaped to broadband-20; mid-run the tab closes and a new tab joins
 * (bench/volunteers-world.ts). Beside it the same DiLoCo world on loopback and DDP on 3 Node ranks
 * on loopback (the reference: the same steps, batches, seed and tokens). Rows `GPT-2 124M diloco
 * ...`: tokens/s of the job, of the lead Node member and of the tab, broadband-20 against loopback;
 * the seconds to admit the second tab (`admit`: its page opened to its holding the world's state);
 * bytes each member sends per token against DDP's; the held-out loss after the run's tokens against
 * DDP's; the tab's peak memory (its renderer's VmHWM). The corpus is made here without a network
 * (bench/volunteers-corpus.ts).
 *
 * Run: `pnpm --filter @webshard/trainer bench:volunteers` (GPT-2: 24 steps, H = 4, the first tab
 * closing at step 8; 42 minutes here for the two worlds and DDP).
 * `WEBSHARD_VOLUNTEERS_MODEL=tiny` for a tiny GPT in well under a minute a world (CI runs it:
 * ranks/volunteers-bench.test.ts);
 * `WEBSHARD_VOLUNTEERS_STEPS`, `_INNER_STEPS`, `_SWAP_AT`, `_COMPRESSION` (`int8`, `int4`, `topk`)
 * change the run, `_LINKS` the links (default `broadband-20,none`; empty: the DDP reference alone),
 * `_DDP=0` leaves the reference out, `_OUT=<file>` writes the rows there instead of bench-results/,
 * `_KEEP=<dir>` keeps every world's JSONL log there with one page of their loss curves overlaid
 * (`volunteers.html`, as `webshard-report` writes it).
 *
 * Status (2026-11-27): the tiny world and the tiny DDP reference run in CI. GPT-2 124M's runs, their
 * numbers and limits are in the trainer README ("Train GPT-2 with volunteers' browsers"), each tab a
 * browser with a profile on disk (incognito OPFS refuses writes past 1.41 GB).
 */
import { copyFile, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BenchRow, writeBenchResults } from '@webshard/bench';
import { findChromium } from '@webshard/test-config/browser-page';
import { reportMain } from '../src/report/report-cli.js';
import { measureDiloco } from './diloco-runs.js';
import { writeGpt2Tokens, writeRepositoryCorpus } from './volunteers-corpus.js';
import { runVolunteerWorld, type VolunteerShape } from './volunteers-world.js';

const env = (name: string) => process.env[`WEBSHARD_VOLUNTEERS_${name}`];
const num = (name: string, fallback: number) => Number(env(name) ?? fallback);
const model = env('MODEL') ?? 'gpt2';
if (model !== 'gpt2' && model !== 'tiny') {
  throw new Error(`WEBSHARD_VOLUNTEERS_MODEL must be tiny or gpt2, not ${model}`);
}
const tiny = model === 'tiny';
function compressionOf(name: string): VolunteerShape['compression'] {
  if (name === 'int8' || name === 'int4' || name === 'topk') return name;
  throw new Error(`WEBSHARD_VOLUNTEERS_COMPRESSION must be int8, int4 or topk, not ${name}`);
}
const SHAPE: VolunteerShape = {
  label: tiny ? 'GPT 1x32 (tiny)' : 'GPT-2 124M',
  layers: tiny ? 1 : 12,
  heads: tiny ? 2 : 12,
  embd: tiny ? 32 : 768,
  block: tiny ? 16 : 256,
  // A batch that divides over every world size the run passes through (2 to maxWorldSize).
  batch: tiny ? 12 : 6,
  // Tiny: 200 steps, so that on loopback (some 70 steps a second) the second tab, opened at
  // step 12, holds the state well before the end: with 120 it landed at steps 92-112 here, and a
  // CI run's tab found the world gone (2026-11-28).
  steps: num('STEPS', tiny ? 200 : 24),
  innerSteps: num('INNER_STEPS', tiny ? 4 : 4),
  compression: compressionOf(env('COMPRESSION') ?? (tiny ? 'int8' : 'topk')),
  swapAt: num('SWAP_AT', tiny ? 12 : 8),
  tokenizer: tiny ? 'char' : 'gpt2',
  memberTimeoutSeconds: tiny ? 60 : 300,
  // GPT-2: at most 3 members, so 6 sequences of 256 tokens a step (12 would be 4 a member, a
  // tab's step of a minute or more here).
  maxWorldSize: tiny ? 4 : 3,
  swap: tiny ? 'overlap' : 'close-first',
};
const LINKS = (env('LINKS') ?? 'broadband-20,none').split(',').filter((l) => l !== '');
const timeoutMs = tiny ? 300_000 : 1_800_000;

const dir = await mkdtemp(join(tmpdir(), 'webshard-volunteers-'));
const rows: BenchRow[] = [];
const { chromium } = await import('playwright-core');
// Each tab a browser with a profile on disk, as a volunteer's is: a context without one
// (incognito) keeps the origin private file system in memory and refuses writes past about
// 1.4 GB, less than a GPT-2 tab's global copy and momentum with the copy a write makes.
let profiles = 0;
const openContext = () =>
  chromium.launchPersistentContext(join(dir, `profile-${profiles++}`), {
    executablePath: findChromium()!,
    args: ['--no-sandbox'],
  });
try {
  const text = join(dir, 'corpus.txt');
  const corpusBytes = await writeRepositoryCorpus(text, tiny ? 64 * 1024 : 6 * 1024 * 1024);
  console.log(`corpus: ${corpusBytes} bytes of the repository's own text, ${text}`);
  // GPT-2's tokens are made once here, as nanoGPT's prepare.py makes its train.bin, so that no
  // member and no tab encodes 6 MB of text itself before it can join (some 20 s of a tab's start).
  const corpus = SHAPE.tokenizer === 'gpt2' ? await writeGpt2Tokens(text) : text;
  const p = `${SHAPE.label} diloco, H=${SHAPE.innerSteps} ${SHAPE.compression}, 2 Node members + a tab`;
  const worlds = new Map<string, Awaited<ReturnType<typeof runVolunteerWorld>>>();
  for (const link of LINKS) {
    const m = await runVolunteerWorld(openContext, dir, SHAPE, corpus, link, timeoutMs);
    worlds.set(link, m);
    console.log(`${link}: ${JSON.stringify(m)}`);
  }
  const ddp =
    env('DDP') === '0'
      ? null
      : await measureDiloco(
          dir,
          {
            ...{ ranks: 3, steps: SHAPE.steps, innerSteps: SHAPE.innerSteps, batch: SHAPE.batch },
            ...{ block: SHAPE.block, embd: SHAPE.embd, layers: SHAPE.layers },
          },
          {
            name: 'DDP',
            args: [
              ...['--strategy', 'ddp', '--n-head', String(SHAPE.heads), '--seed', '7'],
              ...['--tokenizer', SHAPE.tokenizer, '--data', corpus],
            ],
          },
          'none',
        );
  const loopback = worlds.get('none');
  for (const [link, m] of worlds) {
    const at = link === 'none' ? 'loopback' : link;
    const vs = link === 'none' || loopback === undefined ? {} : { peer: 'loopback' };
    const peer = (value: number | undefined) =>
      'peer' in vs && value !== undefined ? { ...vs, peerValue: value } : {};
    rows.push(
      {
        name: `${p}, ${at}: job`,
        metric: 'tokens/s',
        value: Math.round(m.jobTokensPerSecond),
        unit: 'tokens/s',
        ...peer(loopback && Math.round(loopback.jobTokensPerSecond)),
      },
      {
        name: `${p}, ${at}: node (lead)`,
        metric: 'tokens/s',
        value: Math.round(m.leadTokensPerSecond),
        unit: 'tokens/s',
        ...peer(loopback && Math.round(loopback.leadTokensPerSecond)),
      },
      {
        name: `${p}, ${at}: tab`,
        metric: 'tokens/s',
        value: Math.round(m.tabTokensPerSecond),
        unit: 'tokens/s',
        ...peer(loopback && Math.round(loopback.tabTokensPerSecond)),
      },
      {
        name: `${p}, ${at}: admit (a new tab's page opened to its holding the state, ${(m.downloadBytes / 1e6).toFixed(1)} MB)`,
        metric: 'admit',
        value: Number(m.admitSeconds.toFixed(1)),
        unit: 's',
      },
      {
        name: `${p}, ${at}: held-out loss after ${m.tokens} tokens`,
        metric: 'loss',
        value: Number(m.heldOutLoss.toFixed(4)),
        unit: 'nats',
        better: 'lower',
        ...(ddp === null
          ? {}
          : { peer: 'DDP on loopback', peerValue: Number(ddp.heldOutLoss.toFixed(4)) }),
      },
    );
    if (m.tabPeakBytes !== null) {
      rows.push({
        name: `${p}, ${at}: tab peak memory (renderer VmHWM, ${m.parameters} parameters)`,
        metric: 'memory',
        value: Math.round(m.tabPeakBytes / 2 ** 20),
        unit: 'MiB',
      });
    }
  }
  const first = worlds.values().next().value;
  if (first !== undefined) {
    rows.push({
      name: `${p}: bytes the lead sends per token`,
      metric: 'bytes/token',
      value: Number(first.bytesPerToken.toPrecision(4)),
      unit: 'B',
      ...(ddp === null
        ? {}
        : {
            peer: 'DDP, 3 ranks (ring volume)',
            peerValue: Number(ddp.bytesPerToken.toPrecision(4)),
          }),
    });
  }
  if (ddp !== null) {
    rows.push({
      name: `${SHAPE.label} ddp, 3 Node ranks, loopback: job`,
      metric: 'tokens/s',
      value: Math.round(ddp.tokensPerSecond),
      unit: 'tokens/s',
    });
  }
  const keep = env('KEEP');
  if (keep !== undefined) await keepLogs(keep);
} finally {
  await rm(dir, { recursive: true, force: true });
}

/** Every world's JSONL log copied to `to`, and one page of their loss curves (`volunteers.html`). */
async function keepLogs(to: string): Promise<void> {
  await mkdir(to, { recursive: true });
  const logs = (await readdir(dir)).filter((name) => name.endsWith('.jsonl'));
  for (const name of logs) await copyFile(join(dir, name), join(to, name));
  const io = {
    stdout: (t: string) => process.stdout.write(t),
    stderr: (t: string) => process.stderr.write(t),
    cwd: to,
  };
  await reportMain([...logs, '-o', 'volunteers.html'], io);
}
const out = env('OUT');
if (out === undefined) writeBenchResults('trainer-volunteers', rows);
else await writeFile(out, `${JSON.stringify(rows, null, 2)}\n`);
