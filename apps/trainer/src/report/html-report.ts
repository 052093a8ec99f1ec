import { formatBytes, type StepRecord } from '../progress.js';
import { REPORT_SCRIPT } from './report-script.js';
import type { UplotAssets } from './uplot-assets.js';

/** One held-out evaluation: the step after which it ran, its loss and its sample. */
export interface EvalPoint {
  step: number;
  loss: number;
  sample: string;
}

/** The per-step values a chart draws (a `StepRecord`, or a line of a JSONL log). */
export type ReportRecord = Pick<
  StepRecord,
  'step' | 'loss' | 'tokensPerSecond' | 'peakDeviceBytes'
> &
  Partial<Pick<StepRecord, 'peakDeviceBytesPerRank' | 'tokensPerSecondPerRank' | 'peakHostBytes'>>;

/** One run of a report: its steps, its evaluations, and how to run it again. */
export interface ReportRun {
  /** The run's name in legends where a report overlays several (a log file's name). */
  name: string;
  /** The command line that reproduces the run, where known. */
  command: string | null;
  /** Tokens a step trains on (for tokens on x); 0 where unknown. */
  tokensPerStep: number;
  records: readonly ReportRecord[];
  evals: readonly EvalPoint[];
}

/** What a report shows: one run (the trainer's `--report`) or several (`webshard-report`). */
export interface ReportData {
  title: string;
  runs: readonly ReportRun[];
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** JSON safe inside a `<script>` element: no `</script>` or comment opener can end it early. */
function scriptJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, '\\u003c');
}

/** The data a report page draws (its JSON block), read back: for tests and tools. */
export function readReportData(html: string): ReportData {
  const open = '<script type="application/json" id="report-data">';
  const start = html.indexOf(open);
  if (start < 0) throw new Error('not a webshard report: no report-data block');
  const from = start + open.length;
  return JSON.parse(html.slice(from, html.indexOf('</script>', from))) as ReportData;
}

function summary(run: ReportRun): string {
  const last = run.records.at(-1);
  if (last === undefined) return 'no steps';
  return `${last.step} steps, final loss ${last.loss.toFixed(4)}, ${Math.round(last.tokensPerSecond)} tokens/s, peak device memory ${formatBytes(last.peakDeviceBytes)}`;
}

/**
 * [Note: the training report]
 * A run (or several, overlaid) as one self-contained HTML page: uPlot (a maintained charting
 * library built for time series, about 50 KB) and the report's own script inlined, the data in a
 * JSON block, nothing from the network. Three charts, each with ticks and a grid on both axes, a
 * legend that shows the values under the cursor, and steps or tokens on x: loss (train loss as a
 * line, held-out loss as points, log scale on demand), tokens per second, and peak memory (one
 * line per rank in a multi-rank run, resident host memory where logged). Each run's settings are
 * the command line that reproduces it; the held-out samples follow. `webshard-report a.jsonl
 * b.jsonl` overlays the JSONL logs of several runs, each in its own colors.
 */
export function renderReport(data: ReportData, assets: UplotAssets): string {
  const runs = data.runs
    .map(
      (run) =>
        `<li><b>${escapeHtml(run.name)}</b>: <span class="summary">${escapeHtml(summary(run))}</span>${run.command === null ? '' : `<pre class="command">${escapeHtml(run.command)}</pre>`}</li>`,
    )
    .join('\n');
  const samples = data.runs
    .flatMap((run) =>
      run.evals
        .filter((e) => e.sample !== '')
        .map(
          (e) =>
            `<h3>${data.runs.length > 1 ? `${escapeHtml(run.name)}, ` : ''}after step ${e.step}</h3><pre>${escapeHtml(e.sample)}</pre>`,
        ),
    )
    .join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(data.title)}</title>
<style>${assets.css}
body{font:14px system-ui,sans-serif;margin:2em;max-width:760px}th{text-align:left;padding-right:1em}pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap}figure{margin:1em 0}figcaption{font-weight:600}</style>
</head><body>
<h1>${escapeHtml(data.title)}</h1>
<ul id="runs">${runs}</ul>
<p><label><input type="checkbox" id="log-loss"> log-scale loss</label>
<label>x: <select id="x-axis"><option value="step">steps</option><option value="tokens">tokens</option></select></label></p>
<div id="charts"></div>
<h2>Samples</h2>${samples || '<p>none</p>'}
<script type="application/json" id="report-data">${scriptJson(data)}</script>
<script>${assets.js}</script>
<script>${REPORT_SCRIPT}</script>
</body></html>
`;
}
