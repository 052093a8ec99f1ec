import { formatBytes, type StepRecord } from '../progress.js';

/** One held-out evaluation: the step after which it ran, its loss and its sample. */
export interface EvalPoint {
  step: number;
  loss: number;
  sample: string;
}

/** What a report shows. */
export interface ReportData {
  title: string;
  /** Flag and value pairs of the run, shown as a table. */
  settings: Record<string, string>;
  records: readonly StepRecord[];
  evals: readonly EvalPoint[];
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

interface Series {
  name: string;
  color: string;
  points: readonly (readonly [number, number])[];
}

const WIDTH = 640;
const HEIGHT = 240;
const PAD = 48;

/** A line chart as inline SVG: axes with min and max labels, one polyline per series. */
function chart(title: string, series: readonly Series[], format: (v: number) => string): string {
  const all = series.flatMap((s) => s.points).filter(([, y]) => Number.isFinite(y));
  if (all.length === 0) return '';
  const xs = all.map(([x]) => x);
  const ys = all.map(([, y]) => y);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs, Math.min(...xs) + 1)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (y1 === y0) [y0, y1] = [y0 - 1, y1 + 1];
  const sx = (x: number) => PAD + ((x - x0) / (x1 - x0)) * (WIDTH - 2 * PAD);
  const sy = (y: number) => HEIGHT - PAD + ((y0 - y) / (y1 - y0)) * (HEIGHT - 2 * PAD);
  const lines = series
    .filter((s) => s.points.length > 0)
    .map((s) => {
      const pts = s.points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(' ');
      const marker =
        s.points.length === 1
          ? `<circle cx="${sx(s.points[0]![0]).toFixed(1)}" cy="${sy(s.points[0]![1]).toFixed(1)}" r="3" fill="${s.color}"/>`
          : '';
      return `<polyline class="series" data-name="${escapeHtml(s.name)}" fill="none" stroke="${s.color}" stroke-width="2" points="${pts}"/>${marker}`;
    })
    .join('');
  const legend = series
    .map(
      (s, i) =>
        `<text x="${WIDTH - PAD - 120}" y="${16 + 14 * i}" fill="${s.color}">${escapeHtml(s.name)}</text>`,
    )
    .join('');
  return `<figure><figcaption>${escapeHtml(title)}</figcaption>
<svg role="img" aria-label="${escapeHtml(title)}" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}">
<rect x="0" y="0" width="${WIDTH}" height="${HEIGHT}" fill="#fff"/>
<line x1="${PAD}" y1="${HEIGHT - PAD}" x2="${WIDTH - PAD}" y2="${HEIGHT - PAD}" stroke="#888"/>
<line x1="${PAD}" y1="${PAD}" x2="${PAD}" y2="${HEIGHT - PAD}" stroke="#888"/>
<text x="${PAD - 4}" y="${PAD}" text-anchor="end">${escapeHtml(format(y1))}</text>
<text x="${PAD - 4}" y="${HEIGHT - PAD}" text-anchor="end">${escapeHtml(format(y0))}</text>
<text x="${PAD}" y="${HEIGHT - PAD + 16}">step ${x0}</text>
<text x="${WIDTH - PAD}" y="${HEIGHT - PAD + 16}" text-anchor="end">step ${x1}</text>
${lines}${legend}</svg></figure>`;
}

/** One color per rank's memory line (repeating past eight ranks). */
const RANK_COLORS = [
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
  '#ff7f0e',
  '#1f77b4',
];

/**
 * The run as one self-contained HTML page: no script, no stylesheet or font from the network,
 * the charts as inline SVG (train and held-out loss, tokens per second, peak device memory, per
 * rank in a multi-rank run), the
 * settings and the held-out samples.
 */
export function renderReport(data: ReportData): string {
  const train: Series = {
    name: 'train loss',
    color: '#1f77b4',
    points: data.records.map((r) => [r.step, r.loss] as const),
  };
  const evalLoss: Series = {
    name: 'held-out loss',
    color: '#d62728',
    points: data.evals.map((e) => [e.step, e.loss] as const),
  };
  const speed: Series = {
    name: 'tokens/s',
    color: '#2ca02c',
    points: data.records.map((r) => [r.step, r.tokensPerSecond] as const),
  };
  const ranks = data.records[0]?.peakDeviceBytesPerRank?.length ?? 0;
  const memory: Series[] =
    ranks > 1
      ? Array.from({ length: ranks }, (_, rank) => ({
          name: `rank ${rank} peak device bytes`,
          color: RANK_COLORS[rank % RANK_COLORS.length]!,
          points: data.records.map((r) => [r.step, r.peakDeviceBytesPerRank?.[rank] ?? 0] as const),
        }))
      : [
          {
            name: 'peak device bytes',
            color: '#9467bd',
            points: data.records.map((r) => [r.step, r.peakDeviceBytes] as const),
          },
        ];
  const settings = Object.entries(data.settings)
    .map(([k, v]) => `<tr><th>${escapeHtml(k)}</th><td>${escapeHtml(v)}</td></tr>`)
    .join('\n');
  const samples = data.evals
    .filter((e) => e.sample !== '')
    .map((e) => `<h3>after step ${e.step}</h3><pre>${escapeHtml(e.sample)}</pre>`)
    .join('\n');
  const last = data.records.at(-1);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(data.title)}</title>
<style>body{font:14px system-ui,sans-serif;margin:2em;max-width:720px}svg text{font:11px sans-serif}th{text-align:left;padding-right:1em}pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap}</style>
</head><body>
<h1>${escapeHtml(data.title)}</h1>
<p id="summary">${last === undefined ? 'no steps' : `${last.step} steps, final loss ${last.loss.toFixed(4)}, ${Math.round(last.tokensPerSecond)} tokens/s, peak device memory ${formatBytes(last.peakDeviceBytes)}`}</p>
${chart('Loss', [train, evalLoss], (v) => v.toFixed(3))}
${chart('Tokens per second', [speed], (v) => String(Math.round(v)))}
${chart(ranks > 1 ? 'Peak device memory per rank' : 'Peak device memory', memory, formatBytes)}
<h2>Settings</h2><table>${settings}</table>
<h2>Samples</h2>${samples || '<p>none</p>'}
</body></html>
`;
}
