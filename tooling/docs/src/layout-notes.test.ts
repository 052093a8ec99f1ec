import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs module of the layout check, without types
import { checkNotes } from '../../layout/notes.mjs';

const ARCH = `# Architecture

## Design notes index

| note | where |
| --- | --- |
| the ring | \`packages/a/src/ring.ts\` |
| where memory goes | \`docs/architecture.md\` |

## Where memory goes
`;

const check = (files: Record<string, string>, arch = ARCH): string[] =>
  checkNotes(new Map(Object.entries({ 'docs/architecture.md': arch, ...files })), arch);

describe("check:layout's design-note check (tooling/layout/notes.mjs)", () => {
  const defined = { 'packages/a/src/ring.ts': '/**\n * [Note: the ring]\n * How it goes.\n */\n' };

  it('passes when every reference is indexed and every entry names the file defining it', () => {
    expect(check({ ...defined, 'packages/b/src/x.ts': '// see [Note: the ring]' })).toEqual([]);
  });

  it('names a reference without an index entry, and the file that refers to it', () => {
    expect(check({ ...defined, 'packages/b/src/x.ts': '// see [Note: the star]' })).toEqual([
      "[Note: the star] (referred to in packages/b/src/x.ts) has no entry in docs/architecture.md's design notes index",
    ]);
  });

  it('names an entry whose file is missing or does not define the note', () => {
    expect(check({})).toEqual([
      'docs/architecture.md: the index names packages/a/src/ring.ts for [Note: the ring], which does not exist',
    ]);
    expect(
      check({
        'packages/a/src/ring.ts': '// only a reference: [Note: the ring]',
        'packages/a/src/other.ts': '/*\n * [Note: the ring]\n */',
      }),
    ).toEqual([
      'docs/architecture.md: the index names packages/a/src/ring.ts for [Note: the ring], but packages/a/src/other.ts defines it',
    ]);
  });

  it('names a note defined in two files; a Markdown heading defines one only where no code does', () => {
    expect(check({ ...defined, 'packages/c/src/y.ts': '/**\n * [Note: the ring]\n */' })).toContain(
      '[Note: the ring] is defined twice: packages/a/src/ring.ts and packages/c/src/y.ts',
    );
    expect(check({ ...defined, 'packages/a/README.md': '## The ring\n' })).toEqual([]);
  });
});
