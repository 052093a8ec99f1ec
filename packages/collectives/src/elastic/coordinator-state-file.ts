import { randomBytes } from 'node:crypto';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { ElasticError } from './errors.js';

/**
 * What a coordinator writes to its state file after every change, to be started again on it:
 * the current epoch, its members in rank order and the next id to give.
 */
export interface CoordinatorState {
  readonly version: 1;
  readonly epoch: number;
  readonly members: readonly number[];
  readonly nextId: number;
  readonly minWorldSize: number;
  readonly maxWorldSize: number;
}

const isIds = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((id) => Number.isSafeInteger(id) && id >= 0);

/**
 * Reads a coordinator's state file: `null` when there is none; an `ElasticError` (code
 * `E_STATE_FILE`, naming the file) when it is not one this version wrote whole.
 */
export async function loadCoordinatorState(path: string): Promise<CoordinatorState | null> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new ElasticError('coordinator', `cannot read the state file ${path}: ${String(error)}`, {
      code: 'E_STATE_FILE',
      cause: error,
    });
  }
  let raw: Record<string, unknown> | null = null;
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === 'object' && parsed !== null) raw = parsed as Record<string, unknown>;
  } catch {
    raw = null;
  }
  if (
    raw === null ||
    raw.version !== 1 ||
    !Number.isSafeInteger(raw.epoch) ||
    (raw.epoch as number) < 0 ||
    !isIds(raw.members) ||
    !Number.isSafeInteger(raw.nextId) ||
    raw.members.some((id) => id >= (raw.nextId as number)) ||
    !Number.isSafeInteger(raw.minWorldSize) ||
    !Number.isSafeInteger(raw.maxWorldSize)
  ) {
    throw new ElasticError(
      'coordinator',
      `the state file ${path} is not a coordinator's state (delete it to start a new world)`,
      { code: 'E_STATE_FILE' },
    );
  }
  return raw as unknown as CoordinatorState;
}

/**
 * A coordinator's state file, written whole or not at all (a temporary file renamed over it), one
 * write at a time in the order asked.
 */
export class CoordinatorStateFile {
  private chain: Promise<void> = Promise.resolve();
  private failed: unknown = null;

  constructor(readonly path: string) {}

  /** Queues a write of `state`; a failed write is reported by `flush`. */
  save(state: CoordinatorState): void {
    const text = `${JSON.stringify(state)}\n`;
    this.chain = this.chain.then(async () => {
      const temporary = `${this.path}.${randomBytes(4).toString('hex')}.tmp`;
      try {
        await writeFile(temporary, text);
        await rename(temporary, this.path);
      } catch (error) {
        this.failed ??= error;
        await rm(temporary, { force: true }).catch(() => {});
      }
    });
  }

  /** Writes `state` (after the queued writes) and waits for it. */
  async write(state: CoordinatorState): Promise<void> {
    this.save(state);
    await this.flush();
  }

  /** Waits for the queued writes; rejects with the first that failed. */
  async flush(): Promise<void> {
    await this.chain;
    if (this.failed !== null) {
      throw new ElasticError(
        'coordinator',
        `cannot write the state file ${this.path}: ${String(this.failed)}`,
        { code: 'E_STATE_FILE', cause: this.failed },
      );
    }
  }

  /** Removes the file once the job is over (after the queued writes). */
  async remove(): Promise<void> {
    this.chain = this.chain.then(() => rm(this.path, { force: true }));
    await this.chain.catch(() => {});
  }
}
