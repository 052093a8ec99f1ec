/**
 * [Note: the docs test's directives]
 * The docs test runs every fenced code block of every README. What a block is and how it runs is
 * said by its language and by HTML comments on the lines just above its fence (invisible on a
 * rendered page), one directive each: `<!-- docs-test: VERB [`TEXT`]: VALUE -->`.
 *
 * - `sh` blocks are commands, run one at a time with bash from the repository root; `ts`/`js`
 *   blocks are programs, run with `npx tsx` in a fresh npm project (`"type": "module"`) that has
 *   the packed packages installed; `text`, `yaml` and other languages are shown output or
 *   configuration and are not run.
 * - `skip: REASON` leaves the whole block out; `skip `TEXT`: REASON` leaves out the block's
 *   commands that contain TEXT. A skip without a reason is an error.
 * - `append `TEXT`: ARGS` appends ARGS to the commands that contain TEXT (a short variant of a long
 *   run: the trainer's later flags override earlier ones, so `--steps 3` shortens any run).
 * - `before: COMMAND` runs COMMAND (bash, from the repository root) before the block.
 * - `in-project` runs an `sh` block in the npm project of the README's programs instead of the
 *   repository root; `file: NAME` writes a `ts` block there as NAME instead of running it (a
 *   script that a later block's command runs).
 * - `expect: REGEX` requires the block's output (stdout and stderr) to match REGEX; `forbid: REGEX`
 *   requires it not to (a warning the README promises is gone).
 * - `timeout: SECONDS` per command (default 120).
 */

/** One directive above a fence. */
export interface Directive {
  verb: 'skip' | 'append' | 'before' | 'in-project' | 'file' | 'expect' | 'forbid' | 'timeout';
  /** The backticked text a per-command directive matches, if any. */
  match?: string;
  value: string;
}

/** A fenced code block of a Markdown file. */
export interface CodeBlock {
  /** 1-based line of the opening fence. */
  line: number;
  lang: string;
  code: string;
  directives: Directive[];
}

const VERBS = new Set<Directive['verb']>([
  'skip',
  'append',
  'before',
  'in-project',
  'file',
  'expect',
  'forbid',
  'timeout',
]);
const DIRECTIVE = /^<!--\s*docs-test:\s*([a-z-]+)(?:\s+`([^`]+)`)?\s*(?::\s*(.*?))?\s*-->$/;

/** Thrown for a directive the docs test cannot read: the file and line say where. */
export class DirectiveError extends Error {
  override name = 'DirectiveError';
}

/** The fenced blocks of `markdown`, in order, with their directives. */
export function extractBlocks(markdown: string, file = 'README.md'): CodeBlock[] {
  const lines = markdown.split('\n');
  const blocks: CodeBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,})\s*([\w-]*)/.exec(lines[i]!);
    if (open === null) continue;
    const [, indent, fence, lang] = open;
    const directives: Directive[] = [];
    for (let j = i - 1; j >= 0; j--) {
      const text = lines[j]!.trim();
      if (!text.startsWith('<!--') || !text.includes('docs-test')) break;
      directives.unshift(parseDirective(text, `${file}:${j + 1}`));
    }
    const body: string[] = [];
    let k = i + 1;
    while (k < lines.length && !lines[k]!.trim().startsWith(fence!)) {
      body.push(lines[k]!.startsWith(indent!) ? lines[k]!.slice(indent!.length) : lines[k]!);
      k++;
    }
    blocks.push({ line: i + 1, lang: lang ?? '', code: body.join('\n'), directives });
    i = k;
  }
  return blocks;
}

function parseDirective(text: string, where: string): Directive {
  const match = DIRECTIVE.exec(text);
  if (match === null) throw new DirectiveError(`${where}: cannot read the directive ${text}`);
  const [, verb, matchText, value = ''] = match;
  if (!VERBS.has(verb as Directive['verb']))
    throw new DirectiveError(`${where}: unknown docs-test directive '${verb}'`);
  if (verb === 'skip' && value === '')
    throw new DirectiveError(`${where}: a skip needs a reason (docs-test: skip: REASON)`);
  const directive: Directive = { verb: verb as Directive['verb'], value };
  if (matchText !== undefined) directive.match = matchText;
  return directive;
}

/**
 * The commands of an `sh` block: one per line, backslash continuations joined, comment lines and
 * blank lines left out.
 */
export function splitCommands(code: string): string[] {
  const commands: string[] = [];
  let current = '';
  for (const raw of code.split('\n')) {
    const line = raw.trimEnd();
    if (current === '' && (line.trim() === '' || line.trim().startsWith('#'))) continue;
    if (line.endsWith('\\')) {
      current += `${line.slice(0, -1)} `;
      continue;
    }
    commands.push((current + line).trim());
    current = '';
  }
  if (current.trim() !== '') commands.push(current.trim());
  return commands;
}

/** `command` without a trailing shell comment (a `#` after whitespace, outside quotes). */
export function stripComment(command: string): string {
  let quote: string | null = null;
  for (let i = 0; i < command.length; i++) {
    const c = command[i]!;
    if (quote !== null) {
      if (c === quote) quote = null;
      else if (c === '\\' && quote === '"') i++;
    } else if (c === "'" || c === '"') quote = c;
    else if (c === '\\') i++;
    else if (c === '#' && (i === 0 || /\s/.test(command[i - 1]!)))
      return command.slice(0, i).trimEnd();
  }
  return command;
}

/** What the docs test does with one command of a block. */
export type CommandPlan = { command: string; skip?: string };

/** Applies a block's `skip` and `append` directives to its commands. */
export function planCommands(block: CodeBlock): CommandPlan[] {
  return splitCommands(block.code).map((command) => {
    const skip = block.directives.find(
      (d) => d.verb === 'skip' && d.match !== undefined && command.includes(d.match),
    );
    if (skip !== undefined) return { command, skip: skip.value };
    let run = command;
    for (const d of block.directives)
      if (d.verb === 'append' && d.match !== undefined && command.includes(d.match))
        run = `${stripComment(run)} ${d.value}`;
    return { command: run };
  });
}

/** The value of the block's first directive `verb`, if any. */
export function directive(block: CodeBlock, verb: Directive['verb']): Directive | undefined {
  return block.directives.find((d) => d.verb === verb && d.match === undefined);
}
