/** One step as the trainer reports it. */
export interface StepRecord {
  step: number;
  steps: number;
  loss: number;
  gradNorm: number;
  lr: number;
  /** Wall time of the step, including reading the loss back. */
  ms: number;
  tokensPerSecond: number;
  /**
   * Wall seconds from the start of this process's training loop to the end of this step's record:
   * what runs between steps (the loop's collectives, evaluations, checkpoints) included, which
   * `ms` leaves out, so tokens over `seconds` is the job's rate (nanoGPT's dt counts the same).
   */
  seconds?: number;
  /** The backend allocator's peak of allocated bytes so far (rank 0's in a multi-rank run). */
  peakDeviceBytes: number;
  /** Every rank's peak, by rank, in a multi-rank run. */
  peakDeviceBytesPerRank?: number[];
  /**
   * Every rank's own tokens a second in a multi-rank run, by rank: its share of the batch over its
   * own step time (they add up to about `tokensPerSecond` when the ranks keep step).
   */
  tokensPerSecondPerRank?: number[];
  /**
   * The peak of memory outside the allocator (rank 0's): registered collective buffers
   * (`group.allocate`, which FSDP and DDP use on the world group of `shm`, `tcp` and two-level
   * worlds). Absent where the backend does not count it.
   */
  peakExternalBytes?: number;
  /**
   * Peak resident memory of this rank's process (RSS; a tab's measured memory), where the platform
   * measures it; with thread ranks the process's, shared by `hostRanksPerProcess` ranks.
   */
  peakHostBytes?: number;
  peakHostBytesPerRank?: number[];
  hostRanksPerProcess?: number;
  /** diloco: the outer steps so far, on a step that ended with an outer sync. */
  outerStep?: number;
  /** diloco: the bytes this rank sent in that sync. */
  outerBytesSent?: number;
  /** diloco: ms from that sync's issue to its average done on this rank (streamed: the fragment's). */
  outerSyncMs?: number;
  /** diloco: of those, the ms this step waited for the network (the part not hidden by overlap). */
  outerWaitMs?: number;
}

/** `rss 4.9 GiB` (`for 2 ranks` when they share the process), or nothing when not measured. */
function formatHost(record: StepRecord): string[] {
  if (record.peakHostBytes === undefined) return [];
  const shared = (record.hostRanksPerProcess ?? 1) > 1;
  return [
    `rss ${formatBytes(record.peakHostBytes)}${shared ? ` for ${record.hostRanksPerProcess} ranks` : ''}`,
  ];
}

/** Bytes as `12.3 MiB`. */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

/** Seconds as `m:ss`, or `h:mm:ss` from an hour. */
function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const two = (n: number) => String(n).padStart(2, '0');
  const hours = Math.floor(s / 3600);
  if (hours === 0) return `${Math.floor(s / 60)}:${two(s % 60)}`;
  return `${hours}:${two(Math.floor(s / 60) % 60)}:${two(s % 60)}`;
}

/** One plain progress line: `step  12/200 | loss 3.1234 | lr 3.00e-3 | 5432 tok/s | peak 1.2 MiB | 94.2 ms`. */
export function formatStep(record: StepRecord): string {
  const width = String(record.steps).length;
  return [
    `step ${String(record.step).padStart(width)}/${record.steps}`,
    `loss ${record.loss.toFixed(4)}`,
    `lr ${record.lr.toExponential(2)}`,
    `${Math.round(record.tokensPerSecond)} tok/s`,
    `peak ${formatBytes(record.peakDeviceBytes)}`,
    ...formatHost(record),
    `${record.ms.toFixed(1)} ms`,
  ].join(' | ');
}

/** Where a run's progress goes: a redrawn bar on a terminal, a line per step otherwise. */
export interface Progress {
  step(record: StepRecord, elapsedSeconds: number): void;
  /** A line of its own (evaluation, messages), printed above the bar. */
  line(text: string): void;
  /** Leave the bar's last state on its own line (and stop listening for resizes). */
  done(): void;
}

/** The terminal a bar is drawn on: its width now, and a way to hear that it changed. */
export interface ProgressTerminal {
  /** The width in columns (`process.stdout.columns`). */
  columns(): number;
  /** Calls `redraw` when the width changes (SIGWINCH: the stream's 'resize'); returns an unsubscribe. */
  onResize?(redraw: () => void): () => void;
}

/**
 * One field of the bar: its text, an optional shorter form, and its priority (lower is kept
 * longer). A new field (a rank's resident memory, say) is one more entry in `barFields`.
 */
export interface ProgressField {
  text: string;
  short?: string;
  priority: number;
}

const SEPARATOR = ' | ';

/**
 * The fields that fit in `width` columns, joined: all in full if they fit; else the shorter forms,
 * least important first; else the least important fields dropped; a last field that still does
 * not fit is cut. The result is never longer than `width`.
 */
export function fitFields(fields: readonly ProgressField[], width: number): string {
  const shown = fields.map((field) => ({ ...field, current: field.text }));
  const join = () => shown.map((f) => f.current).join(SEPARATOR);
  const byImportance = [...shown].sort((a, b) => b.priority - a.priority);
  for (const field of byImportance) {
    if (join().length <= width) return join();
    if (field.short !== undefined) field.current = field.short;
  }
  for (const field of byImportance) {
    if (join().length <= width || shown.length === 1) break;
    shown.splice(shown.indexOf(field), 1);
  }
  return join().slice(0, Math.max(0, width));
}

/**
 * The bar's fields for `record`, in the order shown; `priority` says which go first when the
 * terminal is narrow (peak memory, then tokens/s; lr is shortened before). The time is tqdm's
 * `elapsed<remaining`.
 */
export function barFields(record: StepRecord, elapsed: number): ProgressField[] {
  const eta = (elapsed / record.step) * (record.steps - record.step);
  return [
    { text: `${record.step}/${record.steps}`, priority: 0 },
    { text: `loss ${record.loss.toFixed(4)}`, priority: 1 },
    {
      text: `lr ${record.lr.toExponential(2)}`,
      short: `lr ${record.lr.toExponential(0)}`,
      priority: 3,
    },
    { text: `${Math.round(record.tokensPerSecond)} tok/s`, priority: 4 },
    { text: `${formatDuration(elapsed)}<${formatDuration(eta)}`, priority: 2 },
    { text: `peak ${formatBytes(record.peakDeviceBytes)}`, priority: 5 },
    ...formatHost(record).map((text) => ({ text, short: text.split(' for ')[0], priority: 6 })),
  ];
}

/** The widest and narrowest `[###...]` drawn before the fields; narrower than that, none. */
const BAR_MAX = 24;
const BAR_MIN = 10;

/**
 * The bar line for a terminal `columns` wide: `[#####.....] 12/200 | loss 3.1234 | lr 3.00e-3 |
 * 5432 tok/s | 0:05<0:37 | peak 1.2 MiB`, fitted by `fitFields` to one column less
 * than the width (a line as wide as the terminal wraps on some), so it never wraps.
 */
export function formatBar(record: StepRecord, elapsed: number, columns: number): string {
  const width = Math.max(1, columns - 1);
  const fields = barFields(record, elapsed);
  const text = fitFields(fields, width - BAR_MIN - 3);
  const room = width - text.length - 3;
  if (room < BAR_MIN) return fitFields(fields, width);
  const size = Math.min(BAR_MAX, room);
  const filled = Math.round((size * record.step) / record.steps);
  return `[${'#'.repeat(filled)}${'.'.repeat(size - filled)}] ${text}`;
}

/**
 * A progress bar redrawn in place when `tty` (`formatBar`, fitted to the terminal's width now,
 * and drawn again when the terminal is resized), else `formatStep` lines.
 */
export function createProgress(
  write: (text: string) => void,
  tty: boolean,
  terminal: ProgressTerminal = { columns: () => 80 },
): Progress {
  let last: { record: StepRecord; elapsed: number } | null = null;
  let bar = '';
  const draw = () => {
    if (last === null) return;
    bar = formatBar(last.record, last.elapsed, terminal.columns());
    write(`\r\x1b[2K${bar}`);
  };
  const unsubscribe = tty ? terminal.onResize?.(draw) : undefined;
  return {
    step(record, elapsed) {
      if (!tty) {
        write(`${formatStep(record)}\n`);
        return;
      }
      last = { record, elapsed };
      draw();
    },
    line(text) {
      write(tty && bar !== '' ? `\r\x1b[2K${text}\n${bar}` : `${text}\n`);
    },
    done() {
      unsubscribe?.();
      if (tty && bar !== '') write('\n');
      bar = '';
      last = null;
    },
  };
}
