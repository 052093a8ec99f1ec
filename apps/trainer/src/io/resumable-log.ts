import { type FileHandle, mkdir, open, readFile, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { StepRecord } from '../progress.js';
import { writeFileAtomically } from './atomic-write.js';
import { logLine } from './log-line.js';

/** The `--log-jsonl` file as a run writes it. */
export interface RunLog {
  write(line: string): Promise<void>;
  close(): Promise<void>;
  /** Resumed: the lines kept (steps up to the resumed one), dropped (past it), restored. */
  readonly kept: number;
  readonly dropped: number;
  readonly restored: number;
  /**
   * Fenced ([Note: one writer of an elastic log]): true once this writer found lines it did not
   * write, after which it writes nothing more.
   */
  readonly superseded: boolean;
}

/**
 * [Note: one writer of an elastic log]
 * An elastic job's log is written by its rank 0, and rank 0 changes: a rank 0 frozen (a closed
 * laptop) is dropped by the others, whose new rank 0 goes on with the file (`appendLog`); woken,
 * the old one still believes it leads until its next sync point, and appended the lines of the
 * steps it took meanwhile after the new one's (steps 4-7 after 9: elastic-stream.test.ts's frozen
 * member, when it was rank 0). So the writer of an elastic log is fenced: it knows the file's
 * size after its own last line, and before each line it checks the size; grown, another rank 0
 * writes the log now, and this one stops (`superseded`). The check and the append are two calls,
 * so a writer woken in the instant between another's check and write could still add one line;
 * every line lands whole either way (the file is opened to append).
 */
async function writer(file: FileHandle, fenced: boolean) {
  let size = fenced ? (await file.stat()).size : 0;
  let superseded = false;
  return {
    get superseded() {
      return superseded;
    },
    async write(line: string) {
      if (superseded) return;
      if (fenced && (await file.stat()).size !== size) {
        superseded = true;
        return;
      }
      const { bytesWritten } = await file.write(line);
      size += bytesWritten;
    },
    close: () => file.close(),
  };
}

/**
 * The `--log-jsonl` file opened to append (an elastic job's new rank 0 goes on with it), and the
 * last step its lines record (0 for none): the member that left may have logged fewer steps than
 * the new rank 0 took since (diloco's members step alone between syncs), and the caller writes
 * the missing ones. A last line cut short by the one who left is ended first. Fenced: [Note: one
 * writer of an elastic log].
 */
export async function appendLog(path: string): Promise<RunLog & { lastStep: number }> {
  await mkdir(dirname(path), { recursive: true });
  const text = await readFile(path, 'utf8').catch(() => '');
  let lastStep = 0;
  for (const line of text.split('\n')) {
    try {
      const record = JSON.parse(line) as { step?: unknown; event?: unknown };
      if (record.event === undefined && typeof record.step === 'number') lastStep = record.step;
    } catch {
      // A line cut short: not a record.
    }
  }
  const file = await open(path, 'a');
  if (text !== '' && !text.endsWith('\n')) await file.write('\n');
  const fenced = await writer(file, true);
  return Object.assign(fenced, { lastStep, kept: 0, dropped: 0, restored: 0 });
}

/**
 * [Note: the log of a resumed run]
 * `--log-jsonl` is a live log, one line per step appended as the step ends (not an atomic file).
 * A new run starts it empty. A run resumed at step k keeps every line of the file up to step k
 * and drops the lines past it (written by a run that crashed after its last checkpoint, they
 * would repeat the steps about to run), and a half-written last line; steps up to k that the file
 * lacks (a run resumed from an earlier step and killed before it wrote them again) come back from
 * the checkpoint's history. The lines are put back atomically before the run appends, and the run
 * says how many it dropped. The report does the
 * same from the history in the checkpoint's `run.json`.
 */
export async function openLog(
  path: string,
  resumedStep: number | null = null,
  history: readonly StepRecord[] = [],
  options: { fenced?: boolean } = {},
): Promise<RunLog> {
  await mkdir(dirname(path), { recursive: true });
  let kept = 0;
  let dropped = 0;
  let restored = 0;
  if (resumedStep !== null) {
    const text = await readFile(path, 'utf8').catch(() => '');
    const lines = text.split('\n').filter((l) => l !== '');
    const keep = new Map<number, string>();
    for (const line of lines) {
      try {
        const step = (JSON.parse(line) as { step?: unknown }).step;
        if (typeof step === 'number' && step <= resumedStep) keep.set(step, `${line}\n`);
      } catch {
        // A half-written line of a killed run: dropped.
      }
    }
    kept = keep.size;
    dropped = lines.length - kept;
    for (const record of history) {
      if (record.step <= resumedStep && !keep.has(record.step)) {
        keep.set(record.step, logLine(record));
        restored += 1;
      }
    }
    const ordered = [...keep.entries()].sort((a, b) => a[0] - b[0]).map(([, line]) => line);
    await writeFileAtomically(path, ordered.join(''));
  }
  // Appending, always: each line lands whole at the end even when another process appends to the
  // same file (an elastic rank 0 that was dropped but does not know it yet, beside the new one).
  if (resumedStep === null) await writeFile(path, '');
  const file = await open(path, 'a');
  return Object.assign(await writer(file, options.fenced ?? false), { kept, dropped, restored });
}
