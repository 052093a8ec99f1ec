import { UsageError } from '../errors.js';
import { CharTokenizer } from './char-tokenizer.js';
import type { Gpt2Tokenizer } from './gpt2-tokenizer.js';

/** What `--tokenizer` names: characters (bytes when not UTF-8), or GPT-2's BPE. */
export const TOKENIZERS = ['char', 'gpt2'] as const;
export type TokenizerName = (typeof TOKENIZERS)[number];

/** The text an id outside a decoder's vocabulary decodes to (U+FFFD, the replacement character). */
export const UNKNOWN_TOKEN_TEXT = '\uFFFD';

/** Turns token ids back into text, for samples. */
export interface Decoder {
  /**
   * Ids below this decode to text; sampling draws only these (a model's vocabulary may be padded
   * past it: [Note: sampling a padded vocabulary]).
   */
  vocabSize: number;
  /** The text of `ids`; an id outside the vocabulary decodes to `UNKNOWN_TOKEN_TEXT`, never throws. */
  decode(ids: ArrayLike<number>): string;
  /** The ids of a prompt, or null when this data has no text form (`.bin` tokens). */
  encode(text: string): Int32Array | null;
}

/** A token stream split into training and held-out parts. */
export interface Dataset {
  /** The first 90 % of the tokens. */
  train: Int32Array;
  /** The last 10 %, for `--eval-every` and the final evaluation. */
  validation: Int32Array;
  /** One more than the largest id the data can hold. */
  vocabSize: number;
  /** What the tokens are: `uint16 tokens`, `characters`, `bytes` or `GPT-2 tokens`. */
  kind: 'uint16 tokens' | 'characters' | 'bytes' | 'GPT-2 tokens';
  decoder: Decoder;
}

type Tokens = Omit<Dataset, 'train' | 'validation'> & { tokens: Int32Array };

/** GPT-2's tokenizer as a decoder, for text and for a `.bin` of its tokens. */
function gpt2Decoder(gpt2: Gpt2Tokenizer): Decoder {
  return {
    vocabSize: gpt2.vocabSize,
    decode: (ids) => gpt2.decode(ids),
    encode: (prompt) => gpt2.encode(prompt),
  };
}

/**
 * nanoGPT's `.bin` files: little-endian uint16 token ids, no header. With GPT-2's tokenizer (what
 * nanoGPT's `prepare.py` writes) every id must be one of its 50257, and samples decode as text.
 */
function fromBin(bytes: Uint8Array, path: string, gpt2: Gpt2Tokenizer | null): Tokens {
  if (bytes.byteLength % 2 !== 0) {
    throw new UsageError(
      `--data ${path}: a .bin holds uint16 tokens, but its ${bytes.byteLength} bytes are an odd count`,
      { option: '--data' },
    );
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const tokens = new Int32Array(bytes.byteLength / 2);
  let max = 0;
  for (let i = 0; i < tokens.length; i++) {
    const id = view.getUint16(2 * i, true);
    tokens[i] = id;
    if (id > max) max = id;
    if (gpt2 !== null && id >= gpt2.vocabSize) {
      throw new UsageError(
        `--data ${path}: token ${id} at ${i} is outside GPT-2's vocabulary of ${gpt2.vocabSize} (--tokenizer gpt2)`,
        { option: '--data' },
      );
    }
  }
  if (gpt2 !== null) {
    return { tokens, vocabSize: gpt2.vocabSize, kind: 'uint16 tokens', decoder: gpt2Decoder(gpt2) };
  }
  const decoder: Decoder = {
    vocabSize: max + 1,
    decode: (ids) => Array.from(ids).join(' '),
    encode: () => null,
  };
  return { tokens, vocabSize: max + 1, kind: 'uint16 tokens', decoder };
}

/**
 * Text as characters (as `shakespeare_char`), or as bytes when it is not valid UTF-8; with GPT-2's
 * tokenizer, as its tokens (as nanoGPT's `shakespeare` and `openwebtext`), UTF-8 required.
 */
function fromText(bytes: Uint8Array, path: string, gpt2: Gpt2Tokenizer | null): Tokens {
  let text: string | null = null;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    text = null;
  }
  if (gpt2 !== null) {
    if (text === null) {
      throw new UsageError(
        `--data ${path} is not UTF-8 text, which --tokenizer gpt2 encodes (a .bin holds tokens)`,
        { option: '--data' },
      );
    }
    return {
      tokens: gpt2.encode(text),
      vocabSize: gpt2.vocabSize,
      kind: 'GPT-2 tokens',
      decoder: gpt2Decoder(gpt2),
    };
  }
  if (text !== null) {
    const tokenizer = CharTokenizer.fromText(text);
    const decoder: Decoder = {
      vocabSize: tokenizer.vocabSize,
      decode: (ids) => Array.from(ids, (id) => tokenizer.vocab[id] ?? UNKNOWN_TOKEN_TEXT).join(''),
      encode: (prompt) => {
        try {
          return tokenizer.encode(prompt);
        } catch {
          return null;
        }
      },
    };
    return {
      tokens: tokenizer.encode(text),
      vocabSize: tokenizer.vocabSize,
      kind: 'characters',
      decoder,
    };
  }
  const decoder: Decoder = {
    vocabSize: 256,
    decode: (ids) =>
      Array.from(ids, (id) =>
        id >= 0 && id < 256 ? String.fromCharCode(id) : UNKNOWN_TOKEN_TEXT,
      ).join(''),
    encode: (prompt) => Int32Array.from(prompt, (c) => c.charCodeAt(0) & 255),
  };
  return { tokens: Int32Array.from(bytes), vocabSize: 256, kind: 'bytes', decoder };
}

/**
 * `bytes` (the file `path`) as a data set: a `.bin` of uint16 tokens, or any other file as
 * characters (bytes when it is not UTF-8), or with `gpt2` (`Gpt2Tokenizer.load()`) as GPT-2's
 * tokens. The first 90 % trains, the last 10 % is held out. Both parts must hold more than one
 * window of `blockSize + 1` tokens. No file io, so a browser rank parses the bytes its page fetched
 * (read-dataset.ts reads the file in Node).
 */
export function datasetFromBytes(
  bytes: Uint8Array,
  path: string,
  blockSize: number,
  gpt2: Gpt2Tokenizer | null = null,
): Dataset {
  const { tokens, ...rest } = path.endsWith('.bin')
    ? fromBin(bytes, path, gpt2)
    : fromText(bytes, path, gpt2);
  const split = Math.floor(tokens.length * 0.9);
  const train = tokens.subarray(0, split);
  const validation = tokens.subarray(split);
  if (validation.length < blockSize + 2) {
    throw new UsageError(
      `--data ${path}: ${tokens.length} tokens are too few for --block-size ${blockSize} (the held-out tenth needs ${blockSize + 2})`,
      { option: '--data' },
    );
  }
  return { train, validation, ...rest };
}
