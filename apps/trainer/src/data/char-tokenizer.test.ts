import { ArgumentError } from '@webshard/tensor-core';
import { describe, expect, it } from 'vitest';
import { loadCorpus } from '../corpus.js';
import { CharTokenizer } from './char-tokenizer.js';

describe('CharTokenizer', () => {
  it('maps sorted characters to ids and back', () => {
    const tokenizer = CharTokenizer.fromText('hello, world');
    expect(tokenizer.vocab).toEqual([' ', ',', 'd', 'e', 'h', 'l', 'o', 'r', 'w']);
    expect([...tokenizer.encode('hold')]).toEqual([4, 6, 5, 2]);
    expect(tokenizer.decode([8, 6, 7, 5, 2])).toBe('world');
  });

  it('covers the shipped corpus with 66 characters and round-trips it', async () => {
    const text = await loadCorpus();
    expect(text.length).toBe(23247);
    const tokenizer = CharTokenizer.fromText(text);
    expect(tokenizer.vocabSize).toBe(66);
    expect(tokenizer.decode(tokenizer.encode(text))).toBe(text);
  });

  it('rejects characters and ids outside the vocabulary', () => {
    const tokenizer = CharTokenizer.fromText('ab');
    expect(() => tokenizer.encode('abc')).toThrow(
      new ArgumentError('encode', 'character "c" at 2 is not in the vocabulary'),
    );
    expect(() => tokenizer.decode([0, 2])).toThrow(
      new ArgumentError('decode', 'token 2 at 1 is outside the vocabulary of 2'),
    );
    expect(() => new CharTokenizer(['a', 'a'])).toThrow(
      new ArgumentError('CharTokenizer', 'vocabulary entry 1 ("a") repeats entry 0'),
    );
  });
});
