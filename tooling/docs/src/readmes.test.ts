// The docs test (#38): every command and program in every README runs, as a user would run it
// from a clone (commands, from the repository root) or from their own npm project (programs, with
// the packed packages). See [Note: the docs test's directives] in markdown-blocks.ts.
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { join, relative } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { makeConsumerProject, repoRoot } from './consumer-project.js';
import { type CodeBlock, directive, extractBlocks, planCommands } from './markdown-blocks.js';
import { blockFailure, isRunnable, runBlock } from './run-block.js';

/** Every README: the root's, each package's and each app's. */
function readmes(): string[] {
  const files = [join(repoRoot, 'README.md')];
  for (const dir of ['packages', 'apps'])
    for (const name of readdirSync(join(repoRoot, dir)).sort()) {
      const file = join(repoRoot, dir, name, 'README.md');
      if (existsSync(file)) files.push(file);
    }
  return files;
}

const all = readmes().map((file) => ({
  file: relative(repoRoot, file),
  blocks: extractBlocks(readFileSync(file, 'utf8'), relative(repoRoot, file)).filter(isRunnable),
}));

/** How many blocks and commands may be left out in all: few, each with its reason. */
const MAX_SKIPPED = 24;

function label(block: CodeBlock): string {
  const first = block.code.split('\n').find((l) => l.trim() !== '' && !l.trim().startsWith('//'));
  return `line ${block.line} (${block.lang}): ${(first ?? '').trim().slice(0, 70)}`;
}

it('leaves out few blocks and commands, each with its reason', () => {
  const skipped: string[] = [];
  for (const { file, blocks } of all)
    for (const block of blocks) {
      const whole = directive(block, 'skip');
      if (whole !== undefined) skipped.push(`${file}:${block.line}: ${whole.value}`);
      else if (block.lang === 'sh')
        for (const plan of planCommands(block))
          if (plan.skip !== undefined)
            skipped.push(`${file}:${block.line}: \`${plan.command.slice(0, 60)}\`: ${plan.skip}`);
    }
  console.log(`docs test: ${skipped.length} left out\n${skipped.join('\n')}`);
  expect(skipped.length).toBeLessThanOrEqual(MAX_SKIPPED);
});

describe.sequential('every README block runs', () => {
  let project = '';
  beforeAll(async () => {
    project = await makeConsumerProject();
  }, 300_000);

  for (const { file, blocks } of all)
    describe(file, () => {
      for (const block of blocks) {
        if (directive(block, 'skip') !== undefined) continue;
        it(label(block), { timeout: 900_000 }, async () => {
          const results = await runBlock(block, { repoRoot, project });
          for (const r of results) {
            const last = (r.stdout ?? '').trimEnd().split('\n').slice(-2).join('\n  ');
            console.log(
              r.skipped ? `skipped \`${r.command}\`: ${r.skipped}` : `$ ${r.command}\n  ${last}`,
            );
          }
          const failure = blockFailure(block, results);
          if (failure !== undefined) throw new Error(`${file}:${block.line}: ${failure}`);
        });
      }
    });
});
