import type { Tiktoken } from 'js-tiktoken/lite';

/** GPT-2's vocabulary: 50000 merges, 256 bytes and `<|endoftext|>`. */
export const GPT2_VOCAB_SIZE = 50257;
/** The id of `<|endoftext|>`, which nanoGPT's `prepare.py` appends after each document. */
export const GPT2_END_OF_TEXT = 50256;

/**
 * [Note: the GPT-2 tokenizer]
 * GPT-2's byte-level BPE, as OpenAI's tiktoken encodes it (`tiktoken.get_encoding("gpt2")`), from
 * `js-tiktoken`, tiktoken's own JavaScript port: its ranks ship inside the package (no download at
 * run time) and it runs in a browser bundle as in Node. It is imported when a run asks for it
 * (`--tokenizer gpt2`), so other runs do not parse its 0.5 MB of ranks. Text encodes as nanoGPT's
 * `prepare.py` does, with `encode_ordinary`: `<|endoftext|>` written in the text is text, not the
 * special token. (`gpt-tokenizer` 4.0 was the other candidate; it did not find an allowed
 * `<|endoftext|>` after other text, and its decoder is one module-wide streaming UTF-8 decoder, so
 * a decode that ends inside a character leaks its bytes into the next decode.)
 */
export class Gpt2Tokenizer {
  readonly vocabSize = GPT2_VOCAB_SIZE;

  private constructor(private readonly bpe: Tiktoken) {}

  /** The tokenizer, loaded once per process or page. */
  static load(): Promise<Gpt2Tokenizer> {
    loading ??= (async () => {
      const [{ Tiktoken }, { default: ranks }] = await Promise.all([
        import('js-tiktoken/lite'),
        import('js-tiktoken/ranks/gpt2'),
      ]);
      return new Gpt2Tokenizer(new Tiktoken(ranks));
    })();
    return loading;
  }

  /** Token ids of `text`, as tiktoken's `encode_ordinary`. */
  encode(text: string): Int32Array {
    return Int32Array.from(this.bpe.encode(text, [], []));
  }

  /**
   * The text of `ids`. An id outside the vocabulary decodes to U+FFFD (never throws); so does a
   * run of tokens that ends inside a UTF-8 character.
   */
  decode(ids: ArrayLike<number>): string {
    let text = '';
    let run: number[] = [];
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (Number.isInteger(id) && id >= 0 && id < GPT2_VOCAB_SIZE) {
        run.push(id);
        continue;
      }
      text += `${this.bpe.decode(run)}\uFFFD`;
      run = [];
    }
    return text + this.bpe.decode(run);
  }
}

let loading: Promise<Gpt2Tokenizer> | undefined;
