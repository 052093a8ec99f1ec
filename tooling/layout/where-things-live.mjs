// The "where things live" check of `check:layout` (#36): in a package README's table under
// `## Where things live`, every path of a row's first column exists, and where the table has an
// import column (`imports` or `may import`), every relative import of a row's files lands in the
// row itself or in what that column names, and every source file of `src/` lies in some row
// (`src/index.ts`, `src/errors.ts` and generated files aside). Pure functions over texts, so the
// docs test can feed them fixtures.
//
// [Note: the import column of where things live]
// The import column speaks of the package's own files; which packages a package may import is the
// layers' business (LAYERS in check-layout.mjs), so a package's name there (`tensor-core`,
// `collectives (types)`) is read and not checked. A cell is a comma-separated list of names, each
// with an optional remark in parentheses; a remark beginning with `types` allows type imports
// only. A name is a row's file or folder without `src/` and `.ts` (`param-group`, `checkpoint`,
// `dtype` for `src/dtype*.ts`), or a file or folder of `src/` that has no row (`errors`); written
// with `.ts` (`collectives.ts`) it is a file, never a package. `nothing` (or `nothing of the
// package`) allows nothing; `all of the above`, `everything above` and `the files above` allow the
// rows above and whatever they may import. After the list, clauses separated by `;` may say
// `` `file.ts` also imports a, b `` for one file of the row that reaches further.

const CODE = /\.(ts|mts|mjs|js)$/;
// Source files a table need not name: the package's entry, its errors, and generated files.
const UNLISTED = /^src\/(index|errors)\.ts$|generated/;
const SPECIAL_NONE = /^nothing( of the package)?$/;
const SPECIAL_ABOVE = /^(all of the above|everything above|the files above)$/;

/** Split `text` on `separator` where it is outside parentheses and backticks. */
function splitOutside(text, separator) {
  const parts = [];
  let depth = 0;
  let code = false;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '`') code = !code;
    else if (!code && c === '(') depth++;
    else if (!code && c === ')') depth = Math.max(0, depth - 1);
    else if (!code && depth === 0 && c === separator) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts.map((p) => p.trim()).filter((p) => p !== '');
}

/** The table under `## Where things live`: its header cells and rows of cells, or null. */
export function whereThingsLiveTable(readme) {
  const at = readme.search(/^## Where things live\s*$/m);
  if (at < 0) return null;
  const lines = readme.slice(at).split('\n').slice(1);
  const first = lines.findIndex((line) => line.startsWith('|'));
  if (first < 0) return null;
  const rows = [];
  for (const line of lines.slice(first)) {
    if (!line.startsWith('|')) break;
    const cells = line
      .slice(1, line.trimEnd().endsWith('|') ? line.trimEnd().length - 1 : undefined)
      .split(/(?<!\\)\|/)
      .map((cell) => cell.trim());
    rows.push(cells);
  }
  const [header, , ...body] = rows;
  return { header, rows: body };
}

/** The package paths a first cell names: `src/a.ts`, `b.ts` (beside the one before), `src/x/`. */
function rowPaths(cell) {
  const paths = [];
  let dir = '';
  for (const [, token] of cell.matchAll(/`([^`]+)`/g)) {
    const path = token.slice(0, -1).includes('/') || paths.length === 0 ? token : dir + token;
    paths.push(path);
    dir = path.endsWith('/') ? path : path.slice(0, path.lastIndexOf('/') + 1);
  }
  return paths;
}

/** Does package path `path` (a file, `dir/`, or a `*` glob) hold `file`? */
function holds(path, file) {
  if (path.endsWith('/')) return file.startsWith(path);
  if (!path.includes('*')) return file === path;
  const pattern = path.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replaceAll('*', '[^/]*');
  return new RegExp(`^${pattern}$`).test(file);
}

/** A path's name in an import column: `src/param-group.ts` is `param-group`, `src/dtype*.ts` `dtype`. */
function keyOf(path) {
  const base = path.replace(/\/$/, '').split('/').pop();
  return base.replace(/\*.*$/, '').replace(CODE, '');
}

/** Relative imports of a source text: `{ spec, types }` (types: erased at run time). */
export function relativeImports(text) {
  const out = [];
  const statement = /^(import|export)\s+(type\s+)?(?:([^'";]*?)\s+from\s+)?['"](\.[^'"]+)['"]/gms;
  for (const m of text.matchAll(statement)) {
    const clause = m[3] ?? '';
    const named = /^\{([^}]*)\}$/.exec(clause.trim());
    const allTypes =
      named !== null &&
      named[1].trim() !== '' &&
      named[1]
        .split(',')
        .filter((s) => s.trim() !== '')
        .every((s) => /^type\s/.test(s.trim()));
    out.push({ spec: m[4], types: m[2] !== undefined || allTypes });
  }
  for (const m of text.matchAll(/\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g)) {
    out.push({ spec: m[1], types: false });
  }
  return out;
}

/** The package file a relative import of `from` names, or null when it is not one. */
function resolveImport(from, spec, files) {
  const parts = from.split('/').slice(0, -1);
  for (const part of spec.split('/')) {
    if (part === '..') parts.pop();
    else if (part !== '.') parts.push(part);
  }
  const target = parts.join('/');
  const candidates = [target, target.replace(/\.js$/, '.ts'), `${target}.ts`, `${target}/index.ts`];
  return candidates.find((c) => files.has(c)) ?? null;
}

/**
 * The problems of package `pkg`'s "where things live" table (`pkg` as `packages/fsdp`, `readme`
 * its README's text, `files` its files by package path to their text, `packages` the short names
 * of the workspace packages). No table, no problems.
 */
export function checkWhereThingsLive(pkg, readme, files, packages) {
  const table = whereThingsLiveTable(readme);
  if (table === null) return [];
  const where = `${pkg}/README.md: where things live`;
  const problems = [];
  const rows = table.rows.map((cells) => ({ cells, paths: rowPaths(cells[0] ?? '') }));
  const fileList = [...files.keys()];
  for (const row of rows) {
    if (row.paths.length === 0) problems.push(`${where}: the row "${row.cells[0]}" names no path`);
    for (const path of row.paths) {
      if (!fileList.some((file) => holds(path, file))) {
        problems.push(`${where}: \`${path}\` does not exist`);
      }
    }
  }
  const column = table.header.findIndex((cell) => /^(may import|imports)$/.test(cell));
  if (column < 0) return problems;

  // What each name of an import column stands for: a row (`{ row, types }`) or a path without a
  // row (`{ path, types }`).
  const resolveName = (item, row) => {
    const remark = /\(([^()]*)\)\s*$/.exec(item);
    const types = remark !== null && /^types\b/.test(remark[1]);
    const raw = (remark === null ? item : item.slice(0, remark.index)).trim().replaceAll('`', '');
    const asFile = CODE.test(raw);
    const name = raw.replace(CODE, '');
    if (!asFile && packages.includes(name)) return [];
    const matches = [];
    rows.forEach((other, j) => {
      if (other.paths.some((path) => keyOf(path) === name)) matches.push({ row: j, types });
    });
    if (matches.length > 0) return matches;
    const own = [`src/${name}.ts`, `src/${name}/`].filter((path) =>
      fileList.some((file) => holds(path, file)),
    );
    if (own.length > 0) return own.map((path) => ({ path, types }));
    problems.push(
      `${where}: the row of \`${row.paths[0]}\` names "${raw}" in its import column, which is no row, no file of src/ and no package`,
    );
    return [];
  };
  const named = rows.map((row, i) => {
    const [list = '', ...clauses] = splitOutside(row.cells[column] ?? '', ';');
    const names = [];
    for (const item of splitOutside(list, ',')) {
      if (SPECIAL_NONE.test(item)) continue;
      if (SPECIAL_ABOVE.test(item)) {
        for (let j = 0; j < i; j++) names.push({ row: j, types: false });
      } else names.push(...resolveName(item, row));
    }
    const also = new Map();
    for (const clause of clauses) {
      const m = /^`([^`]+)` also imports (.+)$/.exec(clause);
      if (m === null) {
        problems.push(
          `${where}: the row of \`${row.paths[0]}\`: cannot read "${clause}" (after a ';', write \`file.ts\` also imports a, b)`,
        );
        continue;
      }
      also.set(
        m[1],
        splitOutside(m[2], ',').flatMap((item) => resolveName(item, row)),
      );
    }
    return { names, also };
  });
  // A layer may import what the layers it names may import: the paths a list of names allows.
  const allows = (names, typesOnly = false, seen = new Set()) => {
    const out = [];
    for (const name of names) {
      const types = typesOnly || name.types;
      if (name.path !== undefined) {
        out.push({ path: name.path, types });
        continue;
      }
      const key = `${name.row}:${types}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push(...rows[name.row].paths.map((path) => ({ path, types })));
      out.push(...allows(named[name.row].names, types, seen));
    }
    return out;
  };
  const allowed = named.map(({ names, also }) => ({
    all: allows(names),
    also: new Map([...also].map(([file, extra]) => [file, allows(extra)])),
  }));

  // Each source file belongs to the row with the longest path holding it.
  const rowOf = (file) => {
    let best = null;
    let length = -1;
    rows.forEach((row, i) => {
      for (const path of row.paths) {
        if (holds(path, file) && path.length > length) {
          best = i;
          length = path.length;
        }
      }
    });
    return best;
  };
  const reported = new Set();
  for (const [file, text] of files) {
    if (!CODE.test(file) || /\.test\.ts$/.test(file) || file.includes('__fixtures__/')) continue;
    const i = rowOf(file);
    if (i === null) {
      if (file.startsWith('src/') && !UNLISTED.test(file))
        problems.push(
          `${where}: \`${file}\` is in no row (add it to the row of its folder, or a row)`,
        );
      continue;
    }
    const row = rows[i];
    const base = file.split('/').pop();
    const mayImport = [...allowed[i].all, ...(allowed[i].also.get(base) ?? [])];
    for (const { spec, types } of relativeImports(text)) {
      const target = resolveImport(file, spec, files);
      if (target === null || rowOf(target) === i) continue;
      if (row.paths.some((path) => holds(path, target))) continue;
      const ok = mayImport.some((entry) => holds(entry.path, target) && (types || !entry.types));
      if (ok) continue;
      const j = rowOf(target);
      const named = j === null ? target : keyOf(rows[j].paths[0]);
      const key = `${i}:${named}`;
      if (reported.has(key)) continue;
      reported.add(key);
      problems.push(
        `${where}: \`${file}\` imports \`${target}\`${types ? ' (types)' : ''}, but the import column of its row (\`${row.paths[0]}\`: "${row.cells[column]}") does not name ${j === null ? 'it' : `"${named}"`}`,
      );
    }
  }
  return problems;
}
