import { ArgumentError } from '@webshard/tensor-core';

/**
 * A character-level tokenizer, as nanoGPT's `shakespeare_char`: the vocabulary is the sorted set
 * of characters of a text, and a token is a character's index in it.
 */
export class CharTokenizer {
  /** The characters, in token order. */
  readonly vocab: readonly string[];
  private readonly index: ReadonlyMap<string, number>;

  constructor(vocab: readonly string[]) {
    const index = new Map<string, number>();
    vocab.forEach((char, i) => {
      if ([...char].length !== 1) {
        throw new ArgumentError(
          'CharTokenizer',
          `vocabulary entry ${i} (${JSON.stringify(char)}) is not one character`,
        );
      }
      if (index.has(char)) {
        throw new ArgumentError(
          'CharTokenizer',
          `vocabulary entry ${i} (${JSON.stringify(char)}) repeats entry ${index.get(char)}`,
        );
      }
      index.set(char, i);
    });
    this.vocab = Object.freeze([...vocab]);
    this.index = index;
  }

  /** The tokenizer of every character in `text`, sorted by code point. */
  static fromText(text: string): CharTokenizer {
    return new CharTokenizer([...new Set(text)].sort());
  }

  get vocabSize(): number {
    return this.vocab.length;
  }

  /** Token ids of `text`; a character outside the vocabulary is an `ArgumentError`. */
  encode(text: string): Int32Array {
    const chars = [...text];
    const ids = new Int32Array(chars.length);
    chars.forEach((char, i) => {
      const id = this.index.get(char);
      if (id === undefined) {
        throw new ArgumentError(
          'encode',
          `character ${JSON.stringify(char)} at ${i} is not in the vocabulary`,
        );
      }
      ids[i] = id;
    });
    return ids;
  }

  /** The text of token ids; an id outside the vocabulary is an `ArgumentError`. */
  decode(ids: ArrayLike<number>): string {
    let text = '';
    for (let i = 0; i < ids.length; i++) {
      const char = this.vocab[ids[i]!];
      if (char === undefined) {
        throw new ArgumentError(
          'decode',
          `token ${ids[i]} at ${i} is outside the vocabulary of ${this.vocabSize}`,
        );
      }
      text += char;
    }
    return text;
  }
}
