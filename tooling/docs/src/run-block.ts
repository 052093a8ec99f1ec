import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type CodeBlock, directive, planCommands } from './markdown-blocks.js';

/** What running one command of a README gave. */
export interface CommandResult {
  command: string;
  /** Why it was not run (a `skip` directive's reason); absent when it ran. */
  skipped?: string;
  status?: number | null;
  /** stdout, then stderr. */
  output?: string;
  stdout?: string;
}

/** Where a block runs: the repository root, and the npm project for programs and `in-project`. */
export interface BlockPlace {
  repoRoot: string;
  project: string;
}

const DEFAULT_TIMEOUT_S = 120;

/**
 * Runs `command` with bash in `cwd`, with the project's bins on the PATH; a command past its
 * timeout is killed with its process group. Asynchronous, so vitest's worker stays responsive.
 */
function run(
  command: string,
  cwd: string,
  place: BlockPlace,
  timeoutS: number,
): Promise<CommandResult> {
  const child = spawn('bash', ['-c', command], {
    cwd,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      PATH: `${join(place.project, 'node_modules', '.bin')}:${process.env.PATH}`,
      // A terminal's width for the trainer's lines; stdout is a pipe, so no progress bar.
      COLUMNS: '100',
    },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (text: string) => {
    stdout += text;
  });
  child.stderr.setEncoding('utf8').on('data', (text: string) => {
    stderr += text;
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    process.kill(-child.pid!, 'SIGKILL');
  }, timeoutS * 1000);
  return new Promise((resolve) => {
    child.once('close', (status) => {
      clearTimeout(timer);
      const note = timedOut ? `\n(killed after the ${timeoutS} s timeout)` : '';
      resolve({ command, status, output: stdout + stderr + note, stdout });
    });
  });
}

/**
 * Runs one block as [Note: the docs test's directives] says: an `sh` block's commands in order
 * (stopping at the first that fails), a program with `npx tsx` in the project. Returns what each
 * command gave; the caller asserts.
 */
export async function runBlock(block: CodeBlock, place: BlockPlace): Promise<CommandResult[]> {
  const timeoutS = Number(directive(block, 'timeout')?.value ?? DEFAULT_TIMEOUT_S);
  const before = directive(block, 'before');
  if (before !== undefined) {
    const result = await run(before.value, place.repoRoot, place, timeoutS);
    if (result.status !== 0) return [result];
  }
  if (block.lang === 'ts' || block.lang === 'js') {
    const file = directive(block, 'file')?.value;
    if (file !== undefined) {
      writeFileSync(join(place.project, file), `${block.code}\n`);
      return [];
    }
    const name = `example.${block.lang}`;
    writeFileSync(join(place.project, name), `${block.code}\n`);
    return [await run(`npx tsx ${name}`, place.project, place, timeoutS)];
  }
  const cwd = directive(block, 'in-project') !== undefined ? place.project : place.repoRoot;
  const results: CommandResult[] = [];
  for (const plan of planCommands(block)) {
    if (plan.skip !== undefined) {
      results.push({ command: plan.command, skipped: plan.skip });
      continue;
    }
    const result = await run(plan.command, cwd, place, timeoutS);
    results.push(result);
    if (result.status !== 0) break;
  }
  return results;
}

/** True for a block the docs test runs (commands and programs), false for output and config. */
export function isRunnable(block: CodeBlock): boolean {
  return ['sh', 'bash', 'shell', 'ts', 'js'].includes(block.lang);
}

/**
 * Why a block failed, or undefined when every command it ran exited 0 and its output matches its
 * `expect` directive: the command, its exit status and the end of its output.
 */
export function blockFailure(block: CodeBlock, results: CommandResult[]): string | undefined {
  for (const result of results) {
    if (result.skipped !== undefined || result.status === 0) continue;
    const tail = (result.output ?? '').slice(-3000);
    return `\`${result.command}\` exited with ${result.status ?? 'no status (killed)'}:\n${tail}`;
  }
  const ran = results.filter((r) => r.skipped === undefined);
  if (ran.length === 0) return undefined;
  const output = ran.map((r) => r.output ?? '').join('');
  const expected = directive(block, 'expect')?.value;
  if (expected !== undefined && !new RegExp(expected).test(output))
    return `the output does not match /${expected}/:\n${output.slice(-3000)}`;
  const forbidden = directive(block, 'forbid')?.value;
  const found = forbidden === undefined ? null : new RegExp(forbidden).exec(output);
  if (found !== null)
    return `the output has /${forbidden}/ ("${found[0]}"):\n${output.slice(-3000)}`;
  return undefined;
}
