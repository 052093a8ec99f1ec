import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCpuBackend, tensor } from '@webshard/tensor-core';
import { loadSafetensors, saveSafetensors } from '@webshard/tensor-core/node';
import { describeBackends } from '@webshard/tensor-core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMain, snapshot, TINY } from './test-support/cli.js';
import { FIXTURES, maxRelativeGap } from './test-support/fixtures.js';

let dir: string;
/** The GPT fixture's shape (PyTorch's weights in `gpt.init.safetensors`). */
const FIXTURE_GPT = [
  ...['--backend', 'cpu', '--n-layer', '2', '--n-head', '2', '--n-embd', '32'],
  ...['--block-size', '16', '--vocab-size', '64', '--batch-size', '4', '--sample-length', '0'],
];
const FIXTURE_INIT = join(FIXTURES, 'gpt.init.safetensors');

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-train-'));
  // 3000 uint16 tokens below 64, nanoGPT's .bin format.
  const tokens = Uint16Array.from({ length: 3000 }, (_, i) => (i * 7 + (i >> 3)) % 64);
  await writeFile(join(dir, 'tokens.bin'), tokens);
  await writeFile(join(dir, 'odd.bin'), new Uint8Array(3));
  await writeFile(join(dir, 'bad.safetensors'), 'not a safetensors file at all');
  await writeFile(join(dir, 'existing.safetensors'), 'the last good checkpoint');
  await mkdir(join(dir, 'a-directory'));
  const backend = createCpuBackend();
  const { tensors } = await loadSafetensors(FIXTURE_INIT, { backend });
  const { 'lm_head.weight': _tied, ...once } = tensors;
  await saveSafetensors(join(dir, 'tied-once.safetensors'), once);
  const untied = {
    ...tensors,
    'lm_head.weight': tensor(new Float32Array(64 * 32), { backend, shape: [64, 32] }),
  };
  await saveSafetensors(join(dir, 'untied.safetensors'), untied);
  const values = await tensors['transformer.ln_f.weight']!.read();
  values[0] = Number.NaN;
  const nan = { ...tensors, 'transformer.ln_f.weight': tensor(values, { backend, shape: [32] }) };
  await saveSafetensors(join(dir, 'nan.safetensors'), nan);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('webshard-train, in process', () => {
  it('trains, logs a JSON line per step, and writes the checkpoint, samples and report atomically', async () => {
    const run = await runMain(
      [
        ...TINY,
        ...['--steps', '4', '--sample-length', '12', '--eval-every', '2'],
        ...['--save', 'out/m.safetensors', '--log-jsonl', 'out/log.jsonl'],
        ...['--report', 'out/report.html', '--samples', 'out/sample.txt'],
      ],
      dir,
    );
    expect(run.stderr).toBe('');
    expect(run.exitCode).toBe(0);
    const losses = run.summary!.records.map((r) => r.loss);
    expect(losses).toHaveLength(4);
    expect(losses.at(-1)!).toBeLessThan(losses[0]!);
    expect(run.stdout).toMatch(
      /^step 4\/4 \| loss \d\.\d{4} \| lr 3\.00e-3 \| \d+ tok\/s \| peak [\d.]+ [KM]iB \| rss [\d.]+ [MG]iB \| [\d.]+ ms$/m,
    );
    expect(run.stdout).toMatch(/^eval after step 2: held-out loss \d\.\d{4} \| ".+"$/m);

    const lines = (await readFile(join(dir, 'out/log.jsonl'), 'utf8')).trim().split('\n');
    const logged = lines.map((l) => JSON.parse(l));
    expect(logged.map((l) => Object.keys(l))).toEqual(
      Array(4).fill([
        'step',
        'loss',
        'lr',
        'tokensPerSecond',
        'seconds',
        'peakDeviceBytes',
        'peakExternalBytes',
        'peakHostBytes',
      ]),
    );
    // seconds: the loop's wall clock at each line, what runs between steps included (the held-out
    // evaluation and sample after step 2 fall between step 2's line and step 3's).
    const seconds = logged.map((l) => l.seconds as number);
    const ms = run.summary!.records.map((r) => r.ms);
    expect(seconds[0]).toBeGreaterThanOrEqual(ms[0]! / 1000);
    const between = seconds.slice(1).map((s, i) => s - seconds[i]! - ms[i + 1]! / 1000);
    for (const gap of between) expect(gap).toBeGreaterThanOrEqual(0);
    expect(between[1]).toBeGreaterThan(between[0]!);
    // One rank registers no collective memory.
    expect(logged.every((l) => l.peakExternalBytes === 0)).toBe(true);
    expect(logged.map((l) => l.loss)).toEqual(losses);
    expect(logged.every((l) => l.peakDeviceBytes > 0 && l.lr === 3e-3)).toBe(true);
    // This process's peak resident memory (the run is in process: one rank, the test's process).
    expect(logged.every((l) => l.peakHostBytes >= l.peakDeviceBytes)).toBe(true);
    expect(logged.at(-1).peakHostBytes).toBeLessThanOrEqual(process.resourceUsage().maxRSS * 1024);

    const saved = await loadSafetensors(join(dir, 'out/m.safetensors'), {
      backend: createCpuBackend(),
    });
    const model = run.summary!.model;
    expect(Object.keys(saved.tensors)).toEqual([...model.stateDict().keys()]);
    expect(await saved.tensors['transformer.ln_f.bias']!.read()).toEqual(
      await model.stateDict().get('transformer.ln_f.bias')!.read(),
    );
    expect(await readFile(join(dir, 'out/sample.txt'), 'utf8')).toBe(run.summary!.sample);
    expect(run.summary!.sample).toHaveLength(13);
    expect(await readFile(join(dir, 'out/report.html'), 'utf8')).toContain('held-out loss');
    expect((await readdir(join(dir, 'out'))).sort()).toEqual([
      'log.jsonl',
      'm.safetensors',
      'report.html',
      'sample.txt',
    ]);
  });

  it('reads a .bin of uint16 tokens and loads --init weights by PyTorch names, the tied one stored once', async () => {
    const data = ['--data', 'tokens.bin', '--steps', '2'];
    const both = await runMain([...FIXTURE_GPT, ...data, '--init', FIXTURE_INIT], dir);
    const once = await runMain([...FIXTURE_GPT, ...data, '--init', 'tied-once.safetensors'], dir);
    expect(both.stderr + once.stderr).toBe('');
    expect(both.stdout).toContain('(3000 uint16 tokens, vocabulary 64)');
    // PyTorch's initial weights on a uniform-ish stream: the first loss is near ln(64) = 4.16.
    expect(both.summary!.records[0]!.loss).toBeCloseTo(Math.log(64), 1);
    expect(once.summary!.records.map((r) => r.loss)).toEqual(
      both.summary!.records.map((r) => r.loss),
    );
  });

  it('gives the same losses with --grad-accum 2 as with one micro-batch', async () => {
    const one = await runMain([...TINY, '--seed', '0'], dir);
    const two = await runMain([...TINY, '--seed', '0', '--grad-accum', '2'], dir);
    const a = one.summary!.records.map((r) => r.loss);
    const b = two.summary!.records.map((r) => r.loss);
    // Steps 2 and 3 follow from the accumulated gradients of the steps before them.
    expect(maxRelativeGap(b, a)).toBeLessThan(1e-5);
  });

  it('trains the MLP, and the GPT in bf16 and fp16, with a falling loss', async () => {
    const mlp = ['--model', 'mlp', '--n-embd', '16', '--batch-size', '16', '--steps', '20'];
    for (const flags of [mlp, ['--precision', 'bf16'], ['--precision', 'fp16']]) {
      const run = await runMain([...TINY, '--lr', '1e-2', ...flags], dir);
      expect(run.stderr, flags.join(' ')).toBe('');
      const losses = run.summary!.records.map((r) => r.loss);
      expect(losses.at(-1)!, flags.join(' ')).toBeLessThan(losses[0]!);
    }
  });

  it('prints the usage for --help and exits 0', async () => {
    const run = await runMain(['--', '--help'], dir);
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toMatch(/^Usage: webshard-train/);
  });
});

/*
 * Every bad input: one line on stderr naming the problem, exit code 2, before any training, and
 * no file in the directory changed (the outputs name existing files, so a write would show).
 */
describe('webshard-train refuses bad input with exit code 2, touching nothing', () => {
  const outputs = ['--save', 'existing.safetensors', '--log-jsonl', 'existing.jsonl'];
  const cases: [string, string[], string][] = [
    ['a missing data file', ['--data', 'nope.txt'], `--data ${'DIR'}/nope.txt: no such file`],
    [
      'a missing init file',
      ['--init', 'nope.safetensors'],
      '--init DIR/nope.safetensors: no such file',
    ],
    [
      'a directory as data',
      ['--data', 'a-directory'],
      '--data DIR/a-directory is a directory, not a file',
    ],
    [
      'a directory as output',
      ['--report', 'a-directory'],
      '--report DIR/a-directory is a directory, not a file',
    ],
    [
      'an output under a file',
      ['--report', 'existing.safetensors/r.html'],
      '--report DIR/existing.safetensors/r.html cannot be written: DIR/existing.safetensors is not a directory',
    ],
    [
      'a bad safetensors file',
      ['--init', 'bad.safetensors'],
      '--init DIR/bad.safetensors is not a valid safetensors file: ',
    ],
    [
      'weights whose shapes do not fit',
      ['--init', FIXTURE_INIT],
      `--init ${FIXTURE_INIT} does not fit the model: [loadStateDict] error(s) loading the state dict of GPT: unexpected keys: transformer.h.1.`,
    ],
    [
      'tied weights that differ',
      ['--init', 'untied.safetensors', '--n-layer', '2', '--n-embd', '32', '--block-size', '16'],
      '--init DIR/untied.safetensors: transformer.wte.weight and lm_head.weight differ, but the model ties them',
    ],
    [
      'a batch not divisible by --grad-accum',
      ['--grad-accum', '3'],
      '--batch-size 4 is not divisible by the world size 1 times --grad-accum 3',
    ],
    [
      'a vocabulary smaller than the data',
      ['--vocab-size', '10'],
      "--vocab-size 10 is smaller than the data's 66 tokens",
    ],
    ['an infinite learning rate', ['--lr', 'Infinity'], '--lr Infinity is not a finite number'],
    ['a NaN beta', ['--beta1', 'NaN'], '--beta1 NaN is not a finite number'],
    ['an out-of-range beta', ['--beta2', '1'], '--beta2 1 is out of range [0, 0.999999]'],
    ['a fractional step count', ['--steps', '2.5'], '--steps 2.5 is not an integer'],
    ['a negative seed', ['--seed=-1'], '--seed -1 is out of range [0, 4294967295]'],
    [
      'an odd-length .bin',
      ['--data', 'odd.bin'],
      '--data DIR/odd.bin: a .bin holds uint16 tokens, but its 3 bytes are an odd count',
    ],
    ['a model over the memory limit', ['--memory-limit', '100000'], 'the run needs about '],
    ['a batch over the host memory', ['--batch-size', '100000000'], "more than the host's "],
    [
      'offload with more slices than layers',
      ['--strategy', 'offload', '--num-slices', '9'],
      '--num-slices 9: 9 slices asked of a model with 3 layers',
    ],
    [
      'a batch that does not split over the ranks',
      ['--strategy', 'ddp', '--world-size', '3'],
      '--batch-size 4 is not divisible by the world size 3 times --grad-accum 1',
    ],
    [
      'a missing --init for ranks in worker threads (checked once, before any rank starts)',
      ['--strategy', 'fsdp', '--world-size', '2', '--init', 'missing.safetensors'],
      '--init DIR/missing.safetensors: no such file',
    ],
    [
      'weights that do not fit, on ranks in this thread',
      [
        ...['--strategy', 'fsdp', '--world-size', '2', '--transport', 'local'],
        ...['--init', 'untied.safetensors'],
      ],
      '--init DIR/untied.safetensors: transformer.wte.weight and lm_head.weight differ',
    ],
    [
      'an unknown strategy',
      ['--strategy', 'zero3'],
      '--strategy zero3 is not one of single, ddp, fsdp, offload',
    ],
    ['an unknown option', ['--stepz', '3'], "Unknown option '--stepz'"],
  ];
  it.each(cases)('%s', async (_name, flags, message) => {
    await writeFile(join(dir, 'existing.jsonl'), 'an old log\n');
    const before = await snapshot(dir);
    const run = await runMain([...TINY, ...outputs, ...flags], dir);
    expect(run.exitCode).toBe(2);
    expect(run.stderr.startsWith('webshard-train: ')).toBe(true);
    expect(run.stderr).toContain(message.replaceAll('DIR', dir));
    expect(run.stderr.endsWith('\n') && run.stderr.split('\n')).toHaveLength(2);
    expect(run.stdout).not.toMatch(/^step /m);
    expect(await snapshot(dir)).toEqual(before);
  });

  it('stops a run whose loss is not finite with exit code 1 naming the step, keeping the checkpoint', async () => {
    const before = await readFile(join(dir, 'existing.safetensors'), 'utf8');
    const run = await runMain(
      [
        ...FIXTURE_GPT,
        '--data',
        'tokens.bin',
        '--init',
        'nan.safetensors',
        '--save',
        'existing.safetensors',
      ],
      dir,
    );
    expect(run.exitCode).toBe(1);
    expect(run.stderr).toBe(
      `webshard-train: the loss is NaN at step 1: stopping before its update; ${dir}/existing.safetensors was not written (an existing file keeps the last good weights)\n`,
    );
    expect(await readFile(join(dir, 'existing.safetensors'), 'utf8')).toBe(before);
    expect((await readdir(dir)).filter((f) => f.endsWith('.partial'))).toEqual([]);
  });
});

/*
 * The CLI on each backend the tensor-core suites run on, named with --backend (so the WebGPU one
 * runs on SwiftShader too, whatever `auto`'s probe would choose: [Note: the trainer's default backend]).
 */
describeBackends('webshard-train --backend <kind>', (ctx) => {
  it('trains a tiny GPT three steps with a finite, falling loss and peak memory reported', async () => {
    const run = await runMain([...TINY, '--backend', ctx.kind, '--lr', '1e-2'], dir);
    expect(run.stderr).toBe('');
    const { records, backend } = run.summary!;
    try {
      expect(backend.kind).toBe(ctx.kind);
      expect(run.stdout).toMatch(new RegExp(`^backend: ${ctx.kind} \\(.+\\)$`, 'm'));
      const losses = records.map((r) => r.loss);
      expect(losses.every(Number.isFinite)).toBe(true);
      expect(losses.at(-1)!).toBeLessThan(losses[0]!);
      expect(records.every((r) => r.peakDeviceBytes > 0)).toBe(true);
    } finally {
      backend.dispose();
    }
  });
});
