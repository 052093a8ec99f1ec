import { mkdir, open, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { writeFileAtomically } from './atomic-write.js';

/** The `--log-jsonl` file as a run writes it. */
export interface RunLog {
  write(line: string): Promise<void>;
  close(): Promise<void>;
  /** Resumed: the lines kept (steps up to the resumed one) and those dropped (past it). */
  readonly kept: number;
  readonly dropped: number;
}

/**
 * [Note: the log of a resumed run]
 * `--log-jsonl` is a live log, one line per step appended as the step ends (not an atomic file).
 * A new run starts it empty. A run resumed at step k keeps every line of the file up to step k
 * and drops the lines past it (written by a run that crashed after its last checkpoint, they
 * would repeat the steps about to run), and a half-written last line; the kept lines are put back
 * atomically before the run appends, and the run says how many it dropped. The report does the
 * same from the history in the checkpoint's `run.json`.
 */
export async function openLog(path: string, resumedStep: number | null = null): Promise<RunLog> {
  await mkdir(dirname(path), { recursive: true });
  let kept = 0;
  let dropped = 0;
  if (resumedStep !== null) {
    const text = await readFile(path, 'utf8').catch(() => '');
    const lines = text.split('\n').filter((l) => l !== '');
    const keep = lines.filter((line) => {
      try {
        const step = (JSON.parse(line) as { step?: unknown }).step;
        return typeof step === 'number' && step <= resumedStep;
      } catch {
        return false;
      }
    });
    kept = keep.length;
    dropped = lines.length - kept;
    await writeFileAtomically(path, keep.map((l) => `${l}\n`).join(''));
  }
  const file = await open(path, resumedStep === null ? 'w' : 'a');
  return {
    async write(line) {
      await file.write(line);
    },
    close: () => file.close(),
    kept,
    dropped,
  };
}
