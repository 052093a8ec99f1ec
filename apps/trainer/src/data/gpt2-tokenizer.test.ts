import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseOptions } from '../cli/options.js';
import { loadCorpus } from '../corpus.js';
import { UsageError } from '../errors.js';
import { runMain, TINY } from '../test-support/cli.js';
import { datasetFromBytes } from './dataset.js';
import { GPT2_END_OF_TEXT, GPT2_VOCAB_SIZE, Gpt2Tokenizer } from './gpt2-tokenizer.js';
import { loadDataset } from './read-dataset.js';

const gpt2 = await Gpt2Tokenizer.load();
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webshard-gpt2-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Published GPT-2 encodings: tiktoken's README and tests, and transformers' GPT2Tokenizer docs. */
const KNOWN: [string, number[]][] = [
  ['Hello world', [15496, 995]],
  ['hello world', [31373, 995]],
  ['Hello, my dog is cute', [15496, 11, 616, 3290, 318, 13779]],
  ['0', [15]],
  ['00', [405]],
  ['000', [830]],
  ['0000', [2388]],
  ['00000', [20483]],
  ['000000', [10535]],
  ['0000000', [24598]],
  ['00000000', [8269]],
  ['000000000', [10535, 830]],
  ['0000000000', [8269, 405]],
  ['0000000000000000', [25645]],
  ['00000000000000000', [8269, 10535, 830]],
  ['', []],
  // encode_ordinary, as nanoGPT's prepare.py: the special token written in text is text.
  ['<|endoftext|>', [27, 91, 437, 1659, 5239, 91, 29]],
];

describe('Gpt2Tokenizer', () => {
  it.each(KNOWN)('encodes %j as GPT-2 does', (text, ids) => {
    expect([...gpt2.encode(text)]).toEqual(ids);
    expect(gpt2.decode(ids)).toBe(text);
  });

  it('has GPT-2 vocabulary and round-trips the sonnets and text in several scripts', async () => {
    expect(gpt2.vocabSize).toBe(GPT2_VOCAB_SIZE);
    expect(gpt2.decode([GPT2_END_OF_TEXT])).toBe('<|endoftext|>');
    const text = await loadCorpus();
    const ids = gpt2.encode(text);
    expect(ids.length).toBeLessThan(text.length / 3);
    expect(gpt2.decode(ids)).toBe(text);
    const mixed = 'naïve café, 日本語, I’m here 🎉';
    expect(gpt2.decode(gpt2.encode(mixed))).toBe(mixed);
  });

  it('decodes ids outside the vocabulary and a character cut in two as U+FFFD, and nothing leaks into the next decode', () => {
    expect(gpt2.decode([31373, 50257, 995, -1, 1.5])).toBe('hello\uFFFD world\uFFFD\uFFFD');
    // "’" is two tokens, [447, 247]: the first alone is an incomplete character.
    expect([...gpt2.encode('’')]).toEqual([447, 247]);
    expect(gpt2.decode([447])).toBe('\uFFFD');
    expect(gpt2.decode([247])).toBe('\uFFFD');
    expect(gpt2.decode([31373])).toBe('hello');
  });
});

describe('--tokenizer gpt2', () => {
  it('tokenizes text data as GPT-2, and checks and decodes a .bin of its tokens', async () => {
    const text = 'Hello, my dog is cute. '.repeat(20);
    const fromText = datasetFromBytes(new TextEncoder().encode(text), 'dogs.txt', 8, gpt2);
    expect(fromText.kind).toBe('GPT-2 tokens');
    expect(fromText.vocabSize).toBe(50257);
    expect([...fromText.train.subarray(0, 6)]).toEqual([15496, 11, 616, 3290, 318, 13779]);
    expect(fromText.decoder.decode(fromText.decoder.encode('hello world')!)).toBe('hello world');

    // nanoGPT's prepare.py output: uint16 GPT-2 tokens, no header.
    const ids = Uint16Array.from({ length: 200 }, (_, i) => [15496, 995, 50256][i % 3]!);
    const bin = datasetFromBytes(new Uint8Array(ids.buffer), 'train.bin', 8, gpt2);
    expect(bin.kind).toBe('uint16 tokens');
    expect(bin.vocabSize).toBe(50257);
    expect(bin.decoder.decode(bin.train.subarray(0, 3))).toBe('Hello world<|endoftext|>');
    // Without the tokenizer, the same file is ids, as before.
    const plain = datasetFromBytes(new Uint8Array(ids.buffer), 'train.bin', 8);
    expect(plain.vocabSize).toBe(50257);
    expect(plain.decoder.decode([15496, 995])).toBe('15496 995');
  });

  it('refuses a .bin token past GPT-2 vocabulary and text that is not UTF-8, naming the file', async () => {
    const ids = Uint16Array.from({ length: 100 }, (_, i) => (i === 37 ? 50300 : 11));
    expect(() => datasetFromBytes(new Uint8Array(ids.buffer), 'bad.bin', 8, gpt2)).toThrow(
      new UsageError(
        "--data bad.bin: token 50300 at 37 is outside GPT-2's vocabulary of 50257 (--tokenizer gpt2)",
        { option: '--data' },
      ),
    );
    expect(() => datasetFromBytes(new Uint8Array([0xff, 0xfe, 0x41]), 'x.dat', 8, gpt2)).toThrow(
      new UsageError(
        '--data x.dat is not UTF-8 text, which --tokenizer gpt2 encodes (a .bin holds tokens)',
        { option: '--data' },
      ),
    );
    expect(() => parseOptions(['--tokenizer', 'bpe'], dir)).toThrow(
      new UsageError('--tokenizer bpe is not one of char, gpt2', { option: '--tokenizer' }),
    );
  });

  it('webshard-train trains on GPT-2 tokens with nanoGPT padded vocabulary and samples text', async () => {
    await writeFile(join(dir, 'dogs.txt'), 'Hello, my dog is cute. My cat is not. '.repeat(40));
    expect((await loadDataset(join(dir, 'dogs.txt'), 8, 'gpt2')).kind).toBe('GPT-2 tokens');
    const run = await runMain(
      [
        ...TINY,
        ...['--data', 'dogs.txt', '--tokenizer', 'gpt2', '--vocab-size', '50304'],
        ...['--sample-length', '12'],
      ],
      dir,
    );
    expect(run.stderr).toBe('');
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toContain('GPT-2 tokens, vocabulary 50304)');
    const sampled = run.summary!.sample;
    expect(sampled.startsWith('\n')).toBe(true);
    expect(sampled.length).toBeGreaterThan(12);
  });
});
