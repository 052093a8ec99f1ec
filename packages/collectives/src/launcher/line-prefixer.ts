import type { Writable } from 'node:stream';

/**
 * Prefixes every complete line written through it with `prefix`; a trailing partial line is held
 * until its newline comes or `flush()` is called.
 */
export class LinePrefixer {
  private pending = '';
  constructor(
    private readonly prefix: string,
    private readonly out: Writable,
  ) {}

  write(chunk: Buffer | string): void {
    const text = this.pending + chunk.toString();
    const lines = text.split('\n');
    this.pending = lines.pop() ?? '';
    if (lines.length > 0) this.out.write(lines.map((line) => `${this.prefix}${line}\n`).join(''));
  }

  flush(): void {
    if (this.pending !== '') this.out.write(`${this.prefix}${this.pending}\n`);
    this.pending = '';
  }
}
