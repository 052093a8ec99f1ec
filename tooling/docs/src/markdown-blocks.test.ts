import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  DirectiveError,
  extractBlocks,
  planCommands,
  splitCommands,
  stripComment,
} from './markdown-blocks.js';
import { blockFailure, runBlock } from './run-block.js';

const README = [
  '# x',
  '',
  '<!-- docs-test: skip `apt-get`: installs system packages -->',
  '<!-- docs-test: append `train`: --steps 3 -->',
  '```sh',
  'apt-get install -y foo   # once',
  'pnpm train   # the default run',
  '# a comment line',
  'webshard-run --nproc-per-node 2 \\',
  '  train.ts --lr 3e-4',
  '```',
  '',
  '- a list item:',
  '',
  '  ```ts',
  '  const a = 1;',
  '  ```',
  '```text',
  'output',
  '```',
].join('\n');

describe('extractBlocks', () => {
  it('finds every fence with its language, line, indented body and directives', () => {
    const blocks = extractBlocks(README);
    expect(blocks.map((b) => [b.line, b.lang])).toEqual([
      [5, 'sh'],
      [15, 'ts'],
      [18, 'text'],
    ]);
    expect(blocks[1]!.code).toBe('const a = 1;');
    expect(blocks[0]!.directives).toEqual([
      { verb: 'skip', match: 'apt-get', value: 'installs system packages' },
      { verb: 'append', match: 'train', value: '--steps 3' },
    ]);
  });

  it('refuses a skip without a reason and an unknown verb, naming the line', () => {
    expect(() => extractBlocks('<!-- docs-test: skip -->\n```sh\nls\n```', 'R.md')).toThrow(
      new DirectiveError('R.md:1: a skip needs a reason (docs-test: skip: REASON)'),
    );
    expect(() => extractBlocks('x\n<!-- docs-test: ignore: x -->\n```sh\nls\n```', 'R.md')).toThrow(
      new DirectiveError("R.md:2: unknown docs-test directive 'ignore'"),
    );
  });
});

describe('commands', () => {
  it('joins continuations, drops comment lines, applies skip and append', () => {
    const [block] = extractBlocks(README);
    expect(splitCommands(block!.code)).toEqual([
      'apt-get install -y foo   # once',
      'pnpm train   # the default run',
      'webshard-run --nproc-per-node 2    train.ts --lr 3e-4',
    ]);
    expect(planCommands(block!)).toEqual([
      { command: 'apt-get install -y foo   # once', skip: 'installs system packages' },
      { command: 'pnpm train --steps 3' },
      { command: 'webshard-run --nproc-per-node 2    train.ts --lr 3e-4 --steps 3' },
    ]);
  });

  it('strips a trailing comment but not a # inside quotes or a word', () => {
    expect(stripComment('echo "a # b" x#y # c')).toBe('echo "a # b" x#y');
    expect(stripComment("echo 'it''s' # c")).toBe("echo 'it''s'");
  });
});

describe('a README whose command does not run', () => {
  const place = { repoRoot: process.cwd(), project: mkdtempSync(join(tmpdir(), 'docs-unit-')) };

  it('fails, naming the command and its exit status', async () => {
    const [block] = extractBlocks('```sh\ntrue\nwebshard-no-such-command --help\necho never\n```');
    const results = await runBlock(block!, place);
    expect(results.map((r) => r.status)).toEqual([0, 127]);
    expect(blockFailure(block!, results)).toMatch(
      /^`webshard-no-such-command --help` exited with 127:\n.*command not found/,
    );
  });

  it('fails when the output does not match its expect directive, and passes when it does', async () => {
    const md = (text: string) =>
      `<!-- docs-test: expect: loss \\d -->\n\`\`\`sh\necho ${text}\n\`\`\``;
    const [bad] = extractBlocks(md('no number'));
    expect(blockFailure(bad!, await runBlock(bad!, place))).toMatch(/does not match \/loss \\d\//);
    const [good] = extractBlocks(md('loss 4.2'));
    expect(blockFailure(good!, await runBlock(good!, place))).toBeUndefined();
  });

  it('fails when the output has what its forbid directive names', async () => {
    const [block] = extractBlocks(
      '<!-- docs-test: forbid: WARN_\\w+ -->\n```sh\necho ok; echo WARN_X >&2\n```',
    );
    expect(blockFailure(block!, await runBlock(block!, place))).toMatch(
      /has \/WARN_\\w\+\/ \("WARN_X"\)/,
    );
  });
});
