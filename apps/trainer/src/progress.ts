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
  /** The backend allocator's peak of allocated bytes so far (rank 0's in a multi-rank run). */
  peakDeviceBytes: number;
  /** Every rank's peak, by rank, in a multi-rank run. */
  peakDeviceBytesPerRank?: number[];
  /**
   * Peak resident memory of this rank's process (RSS; a tab's measured memory), where the platform
   * measures it; with thread ranks the process's, shared by `hostRanksPerProcess` ranks.
   */
  peakHostBytes?: number;
  peakHostBytesPerRank?: number[];
  hostRanksPerProcess?: number;
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

function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
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
  /** Leave the bar's last state on its own line. */
  done(): void;
}

/**
 * A progress bar (`[#####.....]  12/200 loss 3.1234 | 5432 tok/s | peak 1.2 MiB | ETA 0:37`)
 * redrawn in place when `tty`, else `formatStep` lines.
 */
export function createProgress(write: (text: string) => void, tty: boolean): Progress {
  let bar = '';
  return {
    step(record, elapsed) {
      if (!tty) {
        write(`${formatStep(record)}\n`);
        return;
      }
      const width = 24;
      const filled = Math.round((width * record.step) / record.steps);
      const eta = (elapsed / record.step) * (record.steps - record.step);
      bar = [
        `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${record.step}/${record.steps}`,
        `loss ${record.loss.toFixed(4)}`,
        `${Math.round(record.tokensPerSecond)} tok/s`,
        `peak ${formatBytes(record.peakDeviceBytes)}`,
        ...formatHost(record),
        `ETA ${formatDuration(eta)}`,
      ].join(' | ');
      write(`\r\x1b[2K${bar}`);
    },
    line(text) {
      write(tty && bar !== '' ? `\r\x1b[2K${text}\n${bar}` : `${text}\n`);
    },
    done() {
      if (tty && bar !== '') write('\n');
      bar = '';
    },
  };
}
