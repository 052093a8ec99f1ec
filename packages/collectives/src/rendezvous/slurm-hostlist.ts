import { ArgumentError } from '@webshard/tensor-core';

/** The most hosts `expandSlurmHostlist` expands before it refuses (a typo, not a cluster). */
export const MAX_SLURM_HOSTS = 1 << 16;

/** Splits `text` at commas outside brackets. */
function splitTopLevel(text: string, bad: (why: string) => never): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '[') {
      if (depth > 0) bad('nested brackets');
      depth++;
    } else if (c === ']') {
      if (depth === 0) bad(`']' without '[' at ${i}`);
      depth--;
    } else if (c === ',' && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  if (depth !== 0) bad("'[' without ']'");
  parts.push(text.slice(start));
  return parts;
}

/** The values of one bracket body, `01-04,07` -> `01 02 03 04 07` (zero padding kept). */
function expandRanges(body: string, bad: (why: string) => never): string[] {
  const values: string[] = [];
  for (const item of body.split(',')) {
    const match = /^(\d+)(?:-(\d+))?$/.exec(item);
    if (match === null) bad(`'${item}' in [${body}] is not a number or a range a-b`);
    const [, low, high = low] = match as unknown as [string, string, string | undefined];
    const from = Number(low);
    const to = Number(high);
    if (to < from) bad(`range ${item} runs backwards`);
    if (to - from + 1 > MAX_SLURM_HOSTS) bad(`range ${item} is over ${MAX_SLURM_HOSTS} hosts`);
    for (let n = from; n <= to; n++) values.push(String(n).padStart(low.length, '0'));
  }
  return values;
}

/** One entry, `rack[1-2]-node[01-02]`: every combination, the first bracket slowest. */
function expandEntry(entry: string, bad: (why: string) => never): string[] {
  let hosts = [''];
  for (const piece of entry.split(/(\[[^\]]*\])/)) {
    if (piece === '') continue;
    const values = piece.startsWith('[') ? expandRanges(piece.slice(1, -1), bad) : [piece];
    if (hosts.length * values.length > MAX_SLURM_HOSTS) bad(`over ${MAX_SLURM_HOSTS} hosts`);
    hosts = hosts.flatMap((prefix) => values.map((value) => prefix + value));
  }
  return hosts;
}

/**
 * Expands a Slurm hostlist (`SLURM_JOB_NODELIST`): `node[01-04,07],gpu3` is `node01 node02
 * node03 node04 node07 gpu3`, zero padding kept, several bracket groups in one name combined
 * (`r[1-2]n[1-2]` is `r1n1 r1n2 r2n1 r2n2`). A malformed list is an `ArgumentError` naming
 * `variable` and the list (an error of `op`), never a guess.
 */
export function expandSlurmHostlist(
  list: string,
  variable = 'SLURM_JOB_NODELIST',
  op = 'rendezvous',
): string[] {
  const bad = (why: string): never => {
    throw new ArgumentError(op, `${variable}='${list}' is not a Slurm hostlist: ${why}`);
  };
  if (/\s/.test(list)) bad('it contains whitespace');
  const hosts: string[] = [];
  for (const entry of splitTopLevel(list, bad)) {
    if (entry === '') bad('an empty host name');
    if (entry.startsWith('[')) bad(`'${entry}' has no host name before its brackets`);
    hosts.push(...expandEntry(entry, bad));
    if (hosts.length > MAX_SLURM_HOSTS) bad(`over ${MAX_SLURM_HOSTS} hosts`);
  }
  return hosts;
}
