// The design-note check of `check:layout` (#36): every `[Note: name]` a file refers to has its
// entry in the index of docs/architecture.md, and every entry names the file that defines it (a
// line holding nothing but the reference, in a comment block). Pure functions over texts, so the
// docs test can feed them fixtures.

const REFERENCE = /\[Note: ([^\]\n]+)\]/g;
const DEFINITION = /^\s*(?:\*|\/\/)?\s*\[Note: ([^\]\n]+)\]\s*$/gm;
const INDEX_ROW = /^\| ([^|`]+?) \| `([^`|]+)` \|$/gm;

/** The note names `text` refers to. */
export function noteReferences(text) {
  const names = [...text.matchAll(REFERENCE)].map((m) => m[1].trim());
  return new Set(names.filter((name) => name !== '...')); // `[Note: ...]`: the convention's name
}

/**
 * The note names `text` defines: a comment line holding only the reference, or in Markdown a
 * heading (`## Where a rank's memory goes` defines "where a rank's memory goes").
 */
export function noteDefinitions(text, markdown = false) {
  if (markdown)
    return new Set([...text.matchAll(/^#{2,4} (.+)$/gm)].map((m) => m[1].trim().toLowerCase()));
  return new Set([...text.matchAll(DEFINITION)].map((m) => m[1].trim()));
}

/** The index of docs/architecture.md: note name to the file it names. */
export function noteIndex(architecture) {
  const at = architecture.indexOf('## Design notes index');
  if (at < 0) return new Map();
  return new Map([...architecture.slice(at).matchAll(INDEX_ROW)].map((m) => [m[1].trim(), m[2]]));
}

/**
 * The problems: a reference with no index entry (naming a file that refers to it), an entry whose
 * file does not exist or does not define it, a note defined twice.
 * `files` maps each path (from the repository root) to its text.
 */
export function checkNotes(files, architecture) {
  const index = noteIndex(architecture);
  const problems = [];
  const definedIn = new Map();
  // Code first; a Markdown heading defines a note only where no code does.
  const ordered = [...files].sort(
    ([a], [b]) => Number(a.endsWith('.md')) - Number(b.endsWith('.md')),
  );
  for (const [path, text] of ordered) {
    const markdown = path.endsWith('.md');
    for (const name of noteDefinitions(text, markdown)) {
      const other = definedIn.get(name);
      if (markdown && other !== undefined) continue;
      if (other !== undefined && other !== path) {
        problems.push(`[Note: ${name}] is defined twice: ${other} and ${path}`);
      }
      definedIn.set(name, path);
    }
  }
  const missing = new Map();
  for (const [path, text] of files) {
    for (const name of noteReferences(text)) {
      if (!index.has(name) && !missing.has(name)) missing.set(name, path);
    }
  }
  for (const [name, path] of missing) {
    problems.push(
      `[Note: ${name}] (referred to in ${path}) has no entry in docs/architecture.md's design notes index`,
    );
  }
  for (const [name, where] of index) {
    if (!files.has(where)) {
      problems.push(
        `docs/architecture.md: the index names ${where} for [Note: ${name}], which does not exist`,
      );
    } else if (definedIn.get(name) !== where && definedIn.get(name.toLowerCase()) !== where) {
      const actual = definedIn.get(name);
      problems.push(
        `docs/architecture.md: the index names ${where} for [Note: ${name}], but ${actual === undefined ? 'no file defines it' : `${actual} defines it`}`,
      );
    }
  }
  return problems;
}
